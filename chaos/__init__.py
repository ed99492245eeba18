"""Fault injection tools for tests and the soak (issue 22): standard library only, no project code.

- `chaos.faultproxy`: a TCP proxy that adds latency, resets connections and blackholes traffic
  between a client (a worker) and a server (PostgreSQL, Redis, RabbitMQ, the simulator). This
  machine's kernel has no netem and toxiproxy is not packaged, so the faults are made in user
  space, on the path the client is told to use.
- `chaos.netns`: network namespaces with veth pairs (`ip netns`, root only), to run a worker as if
  on another host and cut its links.

The apps never import this package (the `no-tooling-in-apps` contract in pyproject.toml).
"""
