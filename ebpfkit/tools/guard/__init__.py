"""guard: BPF-LSM protection of files and processes, pinned so it outlives its agent.

core:  resolve a policy to (dev, ino) keys, fill/swap the pinned maps, status, stop.
agent: the process that loads, attaches and pins, then logs violations as JSON lines.
"""
