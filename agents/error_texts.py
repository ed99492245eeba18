"""How to read the error texts the agents and the supervisor record, in one place.

An attempt's error is written for operators (`payment refused (402): {"error":"card_declined"}`,
`GET https://api.example/x answered 500: {...}`, `nightly_export: ValueError: no rows`); the
customer pages turn it into a sentence. Which sentence belongs to the domain (the order pages
speak of cards and stock, orders/reasons.py; the job pages of services and tasks,
jobs/reasons.py); what the texts look like belongs here, beside the agents that write them
(agents/base.py, agents/http_call.py, agents/schedulable.py) and the supervisor's texts
(supervisor/services.py, scheduler/services/failure.py).
"""

from __future__ import annotations

import re

# A remote service's refusal (agents/remote.py remote_post): "payment refused (402): {...}".
REFUSED = re.compile(r"^\S+ refused \((?P<status>\d+)\): (?P<body>.*)$", re.DOTALL)
# The service could not be used at that moment: a 5xx / 429, unreachable, timed out, a body we
# do not take, or its circuit breaker open.
UNAVAILABLE = re.compile(
    r"^\S+ (answered \d+|unreachable|timed out|sent a body)"
    r"|^circuit open for |^probe failed, circuit open for "
)
# The supervisor: no reply came before the attempt's complete-by; no agent started it in time.
NO_REPLY = re.compile(r"^no reply before complete_by")
NOT_STARTED = re.compile(r"^not started by ")
CANCELLED = re.compile(r"^cancelled by ")
# An HTTP-call job's answer (agents/http_call.py): "GET https://host/path answered 500: body".
HTTP_ANSWERED = re.compile(
    r"^(?P<method>[A-Z]+) (?P<url>\S+) answered (?P<status>\d{3}): ?(?P<body>.*)$", re.DOTALL
)
# A transport fault of a call (agents/faults.py transport_faults): "<what> unreachable: ...",
# "<what> timed out after 2.00s"; for an HTTP call, <what> is "GET https://host/path".
HTTP_UNREACHABLE = re.compile(r"^(?:[A-Z]+ )?(?P<url>\S+) unreachable: ")
HTTP_TIMED_OUT = re.compile(r"^(?:[A-Z]+ )?(?P<url>\S+) timed out after ")
# A @schedulable task that raised (agents/schedulable.py): "task_name: ValueError: message".
TASK_RAISED = re.compile(r"^(?P<task>[\w.]+): (?P<exception>[A-Za-z_][\w.]*): ?(?P<message>.*)$", re.DOTALL)
# How a step that gave up is summed up (scheduler/services/failure.py): "<cause> N times
# (limit M): <last error>", "its deadline passed (<cause>; N failures): <last error>".
GAVE_UP = re.compile(r"^(?P<cause>\w+) (?P<count>\d+) times \(limit \d+\): (?P<error>.*)$", re.DOTALL)
DEADLINE_PASSED = re.compile(
    r"^its deadline passed \((?P<cause>\w+); (?P<count>\d+) failures\): (?P<error>.*)$", re.DOTALL
)
# How a run's error names its failed step (scheduler/services/failure.py step_errored_settle).
STEP_FAILED = re.compile(r"^step (?P<step>\S+) failed: (?P<error>.*)$", re.DOTALL)
COMPENSATION_FAILED = re.compile(r"^compensation (?P<step>\S+) failed: (?P<error>.*)$", re.DOTALL)
