"""CUDA graph replay, Python's side: which operations are steps of a recording (steps.py, read by the compiler)
and the recorder that records and proves a specialization's graph (recorder.py, called by the entry).

The native side is csrc/graphs/: when a specialization records and replays (policy.h, one SpecGraphs object per
specialization), recording and replaying steps (replay.cpp), and the replay plan (replay_plan.cpp). This package
imports nothing at its top, so that the compiler can read steps.py without loading the recorder.
"""
