"""State machine definitions in ``stepfunctions/``: discovery and ``${...}`` substitution.

The same files are deployed by ``template.yaml`` (``DefinitionSubstitutions``)
and registered by the local stack; both fill the same placeholders.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

from dependency_tracker.core.errors import ConfigurationError

SUFFIX = ".asl.json"
_PLACEHOLDER = re.compile(r"\$\{([A-Za-z][A-Za-z0-9_]*)\}")

# Every placeholder a definition may use; template.yaml provides the same keys.
SUBSTITUTION_KEYS = frozenset(
    {
        "ProcessQueueUrl",
        "StateTableName",
        "DependencyTableName",
        "PayloadBucketName",
        "Prefix",
        "DefaultTimeoutSeconds",
        "DefaultMaxConcurrency",
        "StatusReportQueueUrl",
        "Partition",
    }
)
# Filled in when a caller gives no value: the local stack and the tests run in the
# ``aws`` partition; template.yaml passes ``AWS::Partition``.
DEFAULT_SUBSTITUTIONS = {"Partition": "aws"}
EXPRESS_SUFFIX = "-express"


def definitions_dir() -> Path:
    """The ``stepfunctions/`` folder shipped with the runtime package."""
    return Path(str(resources.files("dependency_tracker") / "stepfunctions"))


def discover(directory: Path | None = None) -> dict[str, Path]:
    """Workflow name (file stem) → definition file, for every ``*.asl.json``."""
    folder = directory or definitions_dir()
    return {path.name[: -len(SUFFIX)]: path for path in sorted(folder.glob(f"*{SUFFIX}"))}


def state_machine_type(name: str) -> str:
    """``EXPRESS`` for a workflow named ``*-express``, else ``STANDARD``.

    Express executions emit no status-change events: such workflows report
    their own end to the status-report queue (see ``simulate-express``).
    """
    return "EXPRESS" if name.endswith(EXPRESS_SUFFIX) else "STANDARD"


def placeholders(text: str) -> set[str]:
    """Names of the ``${...}`` placeholders in a definition."""
    return set(_PLACEHOLDER.findall(text))


def render(path: Path, substitutions: dict[str, str]) -> str:
    """The definition at ``path`` with every placeholder filled.

    A placeholder of :data:`DEFAULT_SUBSTITUTIONS` that ``substitutions`` leaves out
    gets its default.

    Raises:
        ConfigurationError: A placeholder has no value.
    """
    substitutions = {**DEFAULT_SUBSTITUTIONS, **substitutions}
    text = path.read_text(encoding="utf-8")
    missing = placeholders(text) - set(substitutions)
    if missing:
        raise ConfigurationError(f"{path.name}: ${{{sorted(missing)[0]}}}", "has no substitution")
    return _PLACEHOLDER.sub(lambda match: substitutions[match.group(1)], text)
