"""The soak's faults: a seeded schedule (every kind in a shuffled order, again and again) and
what each does. Faults run one after another in the injector thread; each is logged with its
start, the moment the system was whole again (`end`: process restarted and ready, server back,
fault cleared) and whether it impaired the engine as a whole (the stuck-step allowance)."""

from __future__ import annotations

import contextlib
import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from simulator.client import SimulatorControl

from .stack import AGENT_WORKERS, READY, SWEEP_SECONDS, Stack, log_offset, stop_group, wait_ready

# Kinds that stop the sweep or the state store for everyone while they last.
IMPAIRING = {
    "kill_control",
    "kill_beat",
    "restart_postgres",
    "restart_redis",
    "restart_rabbitmq",
    "pg_latency",
    "pg_reset",
    "broker_latency",
    "broker_reset",
}
STEP_WINDOW = 5.0  # an order step's queue + run window (sastools/profile.py: 2 + 3 s)


@dataclass
class Fault:
    kind: str
    target: str
    start: float
    end: float = 0.0
    note: str = ""
    ok: bool = True
    # Its own choices (which worker, which service), drawn from the seeded schedule: the same
    # seed picks the same targets whatever order the fault threads run in.
    rng: random.Random = field(default_factory=random.Random, repr=False)

    @property
    def impairing(self) -> bool:
        # A control worker or beat that exited on its own stops the sweep until it is back too.
        return self.kind in IMPAIRING or self.kind in ("exit:control", "exit:beat")


@dataclass
class Injector:
    stack: Stack
    rng: random.Random
    hold: float = 4.0  # how long a fault of the remote services / proxies lasts
    log: list[Fault] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    say: Callable[[str], None] = print
    _guard: threading.Lock = field(default_factory=threading.Lock)
    _locks: dict[str, threading.Lock] = field(default_factory=dict)

    def kinds(self) -> list[str]:
        kinds = [
            "kill_agent",
            "kill_control",
            "kill_dispatcher",
            "kill_beat",
            "kill_simulator",
            "sigstop_agent",
            "restart_redis",
            "restart_postgres",
            "remote_slow",
            "remote_error",
            "remote_hang",
            "remote_down",
            "second_beat",
            "second_supervisor",
        ]
        if self.stack.rabbit is not None:
            kinds.append("restart_rabbitmq")
        if self.stack.proxies:
            kinds += ["pg_latency", "pg_reset", "broker_latency", "broker_reset"]
        return kinds

    def schedule(self, seconds: float) -> list[tuple[float, str, int]]:
        """(offset, kind, seed of its choices): every kind once per round, shuffled, one slot of
        `gap` seconds each at a random point of its slot (so a two-minute soak meets every kind
        once; a long one every few minutes)."""
        kinds = self.kinds()
        gap = max(1.0, min(20.0, (seconds - 2.0) / len(kinds)))
        plan: list[tuple[float, str, int]] = []
        slot = 0
        while True:
            order = kinds[:]
            self.rng.shuffle(order)
            for kind in order:
                t = 2.0 + slot * gap + self.rng.uniform(0.0, 0.5) * gap
                if t > seconds:
                    return plan
                plan.append((t, kind, self.rng.randrange(1 << 30)))
                slot += 1

    def run(self, plan: list[tuple[float, str, int]], began: float, until: float) -> None:
        """Each fault at its time, in a thread of its own (a slow restart does not hold up the
        next fault); two faults on one target (a process, the servers) never at once."""
        threads = []
        for offset, kind, seed in plan:
            wait = began + offset - time.monotonic()
            if wait > 0 and self.stop.wait(wait):
                break
            if time.monotonic() > until:
                break
            thread = threading.Thread(target=self._one, args=(kind, seed), daemon=True)
            thread.start()
            threads.append(thread)
        for thread in threads:
            thread.join(timeout=240)

    def lock(self, target: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(target, threading.Lock())

    def _one(self, kind: str, seed: int) -> None:
        fault = Fault(kind, "", time.time(), rng=random.Random(seed))
        try:
            getattr(self, kind)(fault)
        except Exception as exc:  # a fault that could not be done is reported, not fatal
            fault.ok, fault.note = False, f"{type(exc).__name__}: {exc}"
        fault.end = fault.end or time.time()
        with self._guard:
            self.log.append(fault)
        self.say(
            f"fault {time.strftime('%H:%M:%S', time.localtime(fault.start))} {kind} {fault.target}"
            f" ({fault.end - fault.start:.1f}s){' ' + fault.note if fault.note else ''}"
        )

    # -- processes -------------------------------------------------------------------------------

    def _kill_restart(self, fault: Fault, name: str, down: float = 1.0) -> None:
        with self.lock(name):
            fault.start = time.time()
            self._kill_restart_locked(fault, name, down)

    def _kill_restart_locked(self, fault: Fault, name: str, down: float) -> None:
        proc = self.stack.procs[name]
        fault.target = name
        proc.kill(signal.SIGKILL)
        time.sleep(down)
        offset = log_offset(proc)
        self.stack.restart(name)
        if not wait_ready(proc, READY.get(name, " ready."), timeout=90, offset=offset):
            fault.ok, fault.note = False, "did not come back within 90 s"
        fault.end = time.time()

    def kill_agent(self, fault: Fault) -> None:
        self._kill_restart(fault, fault.rng.choice(AGENT_WORKERS))

    def kill_control(self, fault: Fault) -> None:
        self._kill_restart(fault, "control")

    def kill_dispatcher(self, fault: Fault) -> None:
        self._kill_restart(fault, "dispatcher")

    def kill_beat(self, fault: Fault) -> None:
        self._kill_restart(fault, "beat")

    def kill_simulator(self, fault: Fault) -> None:
        self._kill_restart(fault, "simulator")

    def sigstop_agent(self, fault: Fault) -> None:
        """Frozen past its steps' deadlines (queue + run window + a sweep), then resumed: a zombie
        whose late replies must be fenced."""
        name = fault.rng.choice(AGENT_WORKERS[:3])
        fault.target = name
        with self.lock(name):
            fault.start = time.time()
            proc = self.stack.procs[name]
            proc.kill(signal.SIGSTOP)
            try:
                time.sleep(STEP_WINDOW + SWEEP_SECONDS + 2)
            finally:
                proc.kill(signal.SIGCONT)

    def second_beat(self, fault: Fault) -> None:
        self._second(fault, "beat", "beat2")

    def second_supervisor(self, fault: Fault) -> None:
        self._second(fault, "control", "control2")

    def _second(self, fault: Fault, name: str, as_name: str) -> None:
        fault.target = as_name
        proc = self.stack.process(name, as_name=as_name)
        self.stack.extra[as_name] = proc
        proc.start(ready_marker=None)
        wait_ready(proc, READY.get(name, " ready."), timeout=60)
        time.sleep(self.hold * 2)
        if stop_group(proc):
            fault.note = "did not exit on SIGTERM within 15 s: killed"
        self.stack.extra.pop(as_name, None)

    # -- servers ---------------------------------------------------------------------------------

    def restart_postgres(self, fault: Fault) -> None:
        with self.lock("servers"):
            fault.start = time.time()
            assert self.stack.pg is not None
            fault.target = f"postgres:{self.stack.pg.port}"
            self.stack.pg.stop("immediate")
            time.sleep(2)
            self.stack.pg.start()

    def restart_redis(self, fault: Fault) -> None:
        with self.lock("servers"):
            fault.start = time.time()
            assert self.stack.redis is not None
            fault.target = f"redis:{self.stack.redis.port}"
            self.stack.redis.kill()
            time.sleep(1)
            self.stack.redis.start()

    def restart_rabbitmq(self, fault: Fault) -> None:
        with self.lock("servers"):
            fault.start = time.time()
            fault.target = f"rabbitmq:{self.stack.rabbit.port}"
            self.stack.rabbit.kill()
            time.sleep(1)
            self.stack.rabbit.start()

    # -- remote services -------------------------------------------------------------------------

    def _remote(self, fault: Fault, **faults: object) -> None:
        service = fault.rng.choice(("inventory", "payment", "shipping"))
        fault.target = f"{service} {faults}"
        sim = SimulatorControl(self.stack.sim_url, timeout=5)
        sim.set_faults(service, **faults)
        try:
            time.sleep(self.hold)
        finally:
            with contextlib.suppress(Exception):  # a killed simulator forgot its faults anyway
                sim.set_faults(service, latency_ms=0, transient_rate=0, hang=False, down=False)

    def remote_slow(self, fault: Fault) -> None:
        self._remote(fault, latency_ms=1500)

    def remote_error(self, fault: Fault) -> None:
        self._remote(fault, transient_rate=0.5, seed=fault.rng.randrange(1 << 30))

    def remote_hang(self, fault: Fault) -> None:
        self._remote(fault, hang=True)

    def remote_down(self, fault: Fault) -> None:
        self._remote(fault, down=True)

    # -- between the workers and PostgreSQL / the broker -----------------------------------------

    def _proxy(self, fault: Fault, which: str, **settings: object) -> None:
        proxy = self.stack.proxies[which]
        fault.target = f"{which} {settings}"
        if settings.get("reset"):
            proxy.reset_all()  # the connections open now are cut, then every new one for a while
        proxy.set(**settings)
        try:
            time.sleep(self.hold)
        finally:
            proxy.set(latency_ms=0, jitter_ms=0, reset=False, blackhole=False)

    def pg_latency(self, fault: Fault) -> None:
        self._proxy(fault, "postgres", latency_ms=200, jitter_ms=100)

    def pg_reset(self, fault: Fault) -> None:
        self._proxy(fault, "postgres", reset=True)

    def broker_latency(self, fault: Fault) -> None:
        self._proxy(fault, "broker", latency_ms=200, jitter_ms=100)

    def broker_reset(self, fault: Fault) -> None:
        self._proxy(fault, "broker", reset=True)
