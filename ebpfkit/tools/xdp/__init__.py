"""XDP networking: the packet filter (rules in LPM tries, changed atomically while traffic
flows) and the Maglev load balancer, with the pins that let them outlive the command.

Modules: ``rules`` (rule model, YAML, validation), ``filter``, ``maglev`` (pure Python table),
``lb``, ``pins`` (pin directories, interfaces in namespaces), ``tables`` (a program's maps as a
set, live or pinned), ``counters`` (the programs' per-CPU counters).
"""
