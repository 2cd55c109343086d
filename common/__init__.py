"""What several parts of trafka share, below all of them but the codec.

brokerlite, the proxy and the SDK's clients build on these; none of them is a
part of its own, and nothing here imports a part (the layers are checked by
``make lint``: ``[tool.importlinter]`` in pyproject.toml).

* :mod:`.lograte`: log lines that a flood of one kind of event cannot multiply.
* :mod:`.accept`: the accept loop of the broker's and the proxy's listeners.
* :mod:`.metrics_http`: ``/metrics``, ``/healthz`` and ``/readyz`` over HTTP.
* :mod:`.histograms`: request-time histograms for a Prometheus scrape.
* :mod:`.lazy`: names a module exports but loads on first use (PEP 562).
* :mod:`.jaas`: the options of Java's JAAS login lines (``sasl.jaas.config``).
"""
