"""Side-by-side broker benchmark after the OpenMessaging Benchmark: `python -m loadtest.bench`.

cli.py (the run), runner.py (one measurement), clients.py (producer and consumer
processes), reqstats.py (the clients' request counts, broker CPU per request),
hist.py (latency histogram), machine.py (the machine's raw limits),
report.py (medians, goals, markdown, plots).
"""
