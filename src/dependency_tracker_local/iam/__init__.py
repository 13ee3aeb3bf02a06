"""IAM in the local model: each call a handler or a state machine makes, checked against its role.

``policy`` evaluates statements, ``roles`` reads them from ``template.yaml``, ``requests``
names what AWS authorizes for each API call, and ``enforce`` checks every botocore call
made as a role. ``docs/local.md`` ("The IAM model") says what is and is not evaluated.
"""
