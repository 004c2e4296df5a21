"""corebench: the orchestration of corelog's benchmarks, in one place.

Modules, each one noun:
  nodes   start a local pair (or a standalone node) of `corelog serve`, wait until it
          answers, read its CPU time and memory from /proc, stop it
  floor   the disk's own floor: fio, 4 KiB O_DIRECT write + fdatasync at queue depth 1
  abba    the alternating schedule of two revisions and the ratio summary of its figures
  ab      `benches/ab.sh`: A/B of two revisions, one sitting (python3 -m corebench.ab)

Standard library only, so that a fresh machine runs it with the system's python3.
"""
