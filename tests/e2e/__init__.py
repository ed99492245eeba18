"""End to end: the order domain on real workers, the simulator and real time - the engine's
invariants (crashes, outages, races, late replies) as a user's orders meet them. The engine's
own tests, free of any domain, are tests/scheduler, tests/supervisor and tests/agents."""
