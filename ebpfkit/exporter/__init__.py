"""`ebpfkit exporter`: tool sessions as Prometheus metrics, read at scrape time.

A consumer of tools, like the CLI: it opens tool sessions (runqlat, iofsstat) and reads
pinned ones (the xdp filter and load balancer, sockmap, the guard), and never imports a tool's command. Tools
do not import it. config.py reads the YAML, sources.py adapts each session, labels.py keeps
series bounded, collector.py hands prometheus_client the families, server.py serves them.
"""
