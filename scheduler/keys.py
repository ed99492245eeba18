"""Which idempotency key a resubmitted step sends, and whether its refusal would come back - the
rules of issue 28, written once and asked by every operator action (ops/run_services.py, the
admin's confirmation pages, the bulk dry run) and by the engine's own resume service.

A remote service stores the first answer it gave for a key - the success, and also the
definitive refusal (a 402 for a declined card) - and replays it for every later call with that
key, as real payment providers do (docs/developing/simulator.md, "Idempotency"). So:

- after a **definitive refusal** (the remote answered no for good: a 4xx, the agent's
  PermanentFault, the step's `error_permanent`), nothing happened under that key, and resending
  it can only bring the stored refusal back. A resubmit after the cause was fixed sends under
  the next key generation: `<base key>:g<n>` (`key_generation` n on the step; generation 1 is
  the key it was submitted with, so existing keys are unchanged). Earlier attempts of the step,
  however ambiguous, used that same key and are covered by the refusal: the remote's record for
  the key is the refusal, so no effect exists under it;
- after an **ambiguous outcome** (a timeout, a lost reply, a 5xx or a broken connection that may
  have reached the service) something may have happened, and only the same key lets the remote
  deduplicate it: the resubmit keeps the key.

The step's row holds the key of its current generation (`Step.idempotency_key`): the agents load
it from there by (step id, lease) (`scheduler.selectors.step_request_held`), payload builders see
it (`StepContext.keys`), so a compensation built later names the forward call by the key that
was sent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sasproject.json_input import json_parse
from scheduler.models import Step
from scheduler.workflows import WorkflowInputError, get_workflow

KEY_GENERATION_FIRST = 1


def step_key_renewable(step: Step) -> bool:
    """Whether a resubmit of `step` sends under a new idempotency key generation: its last
    outcome was a definitive refusal (Error, refused for good: the remote said no, nothing
    happened). Any other outcome - an Error after timeouts, lost replies or faults that may have
    reached the service, a compensation waiting out its backoff after such failures - keeps the
    key, so the remote deduplicates whatever may have happened."""
    return step.process_state == Step.State.ERROR and step.error_permanent


def idempotency_key_of(*, base: str, generation: int) -> str:
    """The key sent at `generation` of a step whose first key is `base`."""
    if generation < KEY_GENERATION_FIRST:
        raise ValueError(f"key generation {generation} is below {KEY_GENERATION_FIRST}")
    return base if generation == KEY_GENERATION_FIRST else f"{base}:g{generation}"


def idempotency_key_base(*, key: str, generation: int) -> str:
    """The first key of a step whose key at `generation` is `key`."""
    if generation == KEY_GENERATION_FIRST:
        return key
    suffix = f":g{generation}"
    if not key.endswith(suffix):
        raise ValueError(f"key {key!r} is not of generation {generation}")
    return key[: -len(suffix)]


@dataclass(frozen=True)
class KeyChoice:
    """What a resubmit of one step sends: `key` at `generation`; `renewed` when that is a new
    generation (its last outcome was a definitive refusal)."""

    step_id: int
    renewed: bool
    key: str
    generation: int

    @property
    def note(self) -> str:
        """The sentence the run's history and the confirmation page show."""
        if self.renewed:
            return (
                f"resubmitted under a new idempotency key (generation {self.generation}): the remote "
                "refused the last one, so nothing had happened"
            )
        return (
            f"resubmitted with the same idempotency key (generation {self.generation}): its last "
            "outcome was ambiguous (something may have happened), so the remote deduplicates it"
        )

    def as_detail(self) -> dict[str, object]:
        """For a history row's or an audit entry's `detail`."""
        return {"key_renewed": self.renewed, "key_generation": self.generation, "idempotency_key": self.key}


def step_key_choice(step: Step) -> KeyChoice:
    """The key a resubmit of `step` would send now (`step_key_renewable` decides). Reads only
    the row given; writes nothing."""
    if not step_key_renewable(step):
        return KeyChoice(step.pk, False, step.idempotency_key, step.key_generation)
    generation = step.key_generation + 1
    base = idempotency_key_base(key=step.idempotency_key, generation=step.key_generation)
    return KeyChoice(step.pk, True, idempotency_key_of(base=base, generation=generation), generation)


# ---------------------------------------------------------------------------------------------
# Refusals that would come back: their cause is in the run's input
# ---------------------------------------------------------------------------------------------

# The agents' refusal texts (agents/remote.py `remote_post`: "payment refused (402): {...}";
# agents/http_call.py: "POST https://... answered 402: {...}").
_REFUSED = re.compile(r"^\S+ refused \((?P<status>\d{3})\): (?P<body>.*)$", re.DOTALL)
_ANSWERED = re.compile(r"^[A-Z]+ \S+ answered (?P<status>4\d\d): (?P<body>.*)$", re.DOTALL)


@dataclass(frozen=True)
class Refusal:
    status: int
    code: str  # the body's `error`, "" when it has none


def refusal_of(error: str) -> Refusal | None:
    """The status and code of a definitive refusal as the agents record it; None for any other
    error text."""
    text = (error or "").strip()
    found = _REFUSED.match(text) or _ANSWERED.match(text)
    if found is None:
        return None
    try:
        # A remote service's words: read with the users' limits (depth, NUL), never a crash.
        body = json_parse(found.group("body"))
    except ValueError:
        body = None
    code = body.get("error") if isinstance(body, dict) else None
    return Refusal(int(found.group("status")), code if isinstance(code, str) else "")


def step_refusal_repeats(step: Step, *, workflow: str) -> str:
    """The refusal code when `step` was refused for good for a reason in the run's input (its
    workflow step's `input_refusals`: a declined card, an item out of stock), so the same request
    would be refused again under any key; "" otherwise (no refusal, or one whose cause may have
    been fixed). Writes nothing."""
    if not (step.process_state == Step.State.ERROR and step.error_permanent):
        return ""
    refusal = refusal_of(step.last_error)
    if refusal is None or not refusal.code:
        return ""
    try:
        declared = get_workflow(workflow).step(step.name).input_refusals
    except (KeyError, WorkflowInputError):
        return ""
    return refusal.code if refusal.code in declared else ""
