"""Write template.yaml as CloudFormation receives it after the SAM transform (offline).

cfn-lint 1.x checks SAM resources against SAM's own schema but no longer runs the
transform, so the resources SAM generates (functions, event source mappings,
permissions, rules) are only linted when the transformed template
is linted itself. ``make lint`` runs::

    .venv/bin/python scripts/sam_transform.py --output "$TMPDIR/deptrack-transformed.json"
    .venv/bin/cfn-lint "$TMPDIR/deptrack-transformed.json"

The transform is the contract tests' (tests/unit/template_contract/transformed.py):
aws-sam-translator with local code and definition paths replaced by S3 locations, as
``sam package`` does, and no AWS call.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    """Transform the template and write it as JSON; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--template", type=Path, default=ROOT / "template.yaml")
    parser.add_argument("--output", type=Path, help="file to write (default: standard output)")
    args = parser.parse_args(argv)
    # The helper lives with the contract tests, which import it as tests.unit....
    sys.path.insert(0, str(ROOT))
    from tests.unit.template_contract.cfn import load_template  # noqa: PLC0415
    from tests.unit.template_contract.transformed import transform  # noqa: PLC0415

    text = json.dumps(transform(load_template(args.template)), indent=2) + "\n"
    if args.output is None:
        sys.stdout.write(text)
    else:
        args.output.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
