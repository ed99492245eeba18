"""The supervisor keeps no models of its own (issue 27): the alert models are alerting's
(alerting/models.py) and the operator's audit is the operator's (ops/models.py). The sweep reads
and writes the engine's steps through the scheduler's statements."""
