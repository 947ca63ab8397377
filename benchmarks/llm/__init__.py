"""LLM decode benchmarks (issue 4): two decoder-only models built from hand-written Triton kernels and ATen
matmuls, timed per token under eager, torch.compile, a CUDA-graph replay and Trident.

    kernels.py      the Triton kernels and the wrappers the models call
    library.py      the `library` op set: kernels.py's kernels behind torch.library custom ops, and gemm.py's
                    Triton matmul behind one (how kernel libraries expose their kernels; issue 20)
    gemm.py         that matmul: a GEMV kernel and a tl.dot kernel, tiles picked from a table by shape
    aten_ops.py     the `aten` op set: the residual add and GELU as ATen ops whose kernels it overrides by the
                    same Triton kernels (torch.library.Library("aten", "IMPL"), flag-gems' pattern)
    reference.py    the same operations in plain torch (no Triton), for correctness checks
    models.py       Llama-3.2-1B-shaped and GPT-2-medium-shaped decoders over a static KV cache
    run.py          the benchmark (python -m benchmarks.llm.run --help)
    hand_graph.py   a step captured by hand as one CUDA graph: the reference run.py, replay_host.py and
                    ../libraries.py hold Trident's replays against
    report.py       its result file, tables and plot; merges result files of several runs
    liger_check.py  Hugging Face Llama with liger-kernel's Triton kernels, one decode step eager vs Trident
"""
