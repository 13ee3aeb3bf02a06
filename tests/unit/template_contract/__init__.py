"""Contract tests between ``template.yaml`` and the code it deploys, offline, and their helpers.

What a deployment would otherwise find out late: handler paths that do not import, settings a
function lacks, ``${...}`` placeholders without a substitution, definitions that do not parse,
IAM statements that miss (or exceed) the calls the code makes, and event filters that differ
from the ones local mode applies. The template is read with cfn-lint's decoder and its
intrinsic functions are resolved for one account and region (``cfn``).

The security checks also cover the grants SAM adds to the roles it generates (``iam``) and
hold docs/security.md's tables to the template (``markdown``). The template's ``Rules`` are
evaluated for given parameter values (``rules``). ``tests/unit/test_transformed_template.py``
reads the template after the SAM transform (``transformed``) and holds these models to it.

Helpers: ``functions``, ``step_functions``, ``parameters``, ``lambda_service`` and
``security_doc`` name what the tests read; ``deployment`` deploys the template on moto behind
a recorder of the handlers' AWS calls, and ``cirrus_at_work`` plays cirrus-geo beside it. The
``test_*`` modules hold the checks, one topic each.
"""
