"""MLX-free CUDA probes: the kernel-alone A/B harness of generated kernels (generated_harness.py,
its standing suites suite.py, run_ab.sh to build and run them, ncu_ab.sh to profile them), its
diagnostic rewrites (diagnostics.py, bulk_rewrite.py), and hand-written copy and launch probes
(*.cu). A package so that the tests can import the rewrites."""
