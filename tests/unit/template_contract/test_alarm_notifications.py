"""``make deploy`` asks where the alarms go: it refuses a deployment whose alarms notify nobody.

The template's defaults leave ``AlarmEmail`` and ``AlarmTopicArn`` empty, and then its alarms
have no actions (``test_alarms_and_outputs.py``). The Makefile's ``deploy`` runs ``sam build``
and ``sam deploy``; here ``SAM=echo`` stands in for the SAM CLI, so the command lines it would
run are printed, and nothing reaches AWS.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.unit.template_contract.cfn import ROOT

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
GATE = (
    "ALARM_EMAIL",
    "ALARM_TOPIC_ARN",
    "NO_ALARM_NOTIFICATIONS",
    "PARAMETER_OVERRIDES",
    "DEPLOY_ARGS",
    "SAM",
)


def make_deploy(*assignments: str) -> subprocess.CompletedProcess[str]:
    """``make deploy SAM=echo ...`` in the project root, the gate's variables unset."""
    env = {name: value for name, value in os.environ.items() if name not in GATE}
    return subprocess.run(  # noqa: S603 - fixed arguments
        ["make", "--no-print-directory", "-s", "deploy", "SAM=echo", *assignments],  # noqa: S607
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def test_make_deploy_refuses_alarms_that_notify_nobody() -> None:
    # WHEN make deploy is run without anywhere for the alarms to go
    done = make_deploy()
    # THEN it stops before building, exit 2, and says how to name where they go
    assert done.returncode == 2, done
    assert done.stdout == ""
    for name in ("ALARM_EMAIL=", "ALARM_TOPIC_ARN=", "NO_ALARM_NOTIFICATIONS=1"):
        assert name in done.stderr


@pytest.mark.parametrize(
    ("assignments", "overrides"),
    [
        pytest.param(
            ("ALARM_EMAIL=ops@example.com",), "--parameter-overrides AlarmEmail=ops@example.com"
        ),
        pytest.param(
            ("ALARM_TOPIC_ARN=arn:aws:sns:us-east-1:123456789012:ops",),
            "--parameter-overrides AlarmTopicArn=arn:aws:sns:us-east-1:123456789012:ops",
        ),
        pytest.param(("NO_ALARM_NOTIFICATIONS=1",), ""),
    ],
)
def test_make_deploy_builds_then_deploys_with_where_the_alarms_go(
    assignments: tuple[str, ...], overrides: str
) -> None:
    # WHEN make deploy is told where the alarms go (or that nobody is meant)
    done = make_deploy(*assignments, "DEPLOY_ARGS=--stack-name ops-test")
    # THEN it builds, then deploys with the alarm parameter alone (the rest keep their values)
    assert done.returncode == 0, done
    assert done.stdout.splitlines() == [
        "build",
        f"deploy --stack-name ops-test {overrides}".rstrip(),
    ]


def test_make_deploy_passes_other_overrides_in_the_same_option() -> None:
    # WHEN make deploy is given other parameters too (SAM keeps only the last
    # --parameter-overrides, so there must be one)
    done = make_deploy(
        "ALARM_EMAIL=ops@example.com", "PARAMETER_OVERRIDES=CirrusPrefix=my-cirrus Prefix=deptrack"
    )
    # THEN they follow the alarm's, in one --parameter-overrides
    assert done.returncode == 0, done
    assert done.stdout.splitlines()[-1] == (
        "deploy --parameter-overrides AlarmEmail=ops@example.com CirrusPrefix=my-cirrus "
        "Prefix=deptrack"
    )
    # AND other parameters alone do not tell where the alarms go
    assert make_deploy("PARAMETER_OVERRIDES=Prefix=deptrack").returncode == 2
