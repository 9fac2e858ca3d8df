"""mlx_metile.patch on tiny mlx-lm models of several architectures and formats."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest
from mlx.utils import tree_map
from mlx_lm.generate import batch_generate, generate_step, speculative_generate_step
from mlx_lm.models.cache import make_prompt_cache

import mlx_metile as mt
from mlx_metile.integrations import mlx_lm as integration
from mlx_metile.integrations import modules
from mlx_metile.integrations.modules import FusedSwiGLU

from .models import ARCHS, FORMATS, make, plant_output_projection_factor, plant_wrong_output_projection

PROMPT = mx.array([3, 17, 42, 7, 99, 5, 64, 12], dtype=mx.uint32)


def greedy(model, n=12, prompt=PROMPT) -> list[int]:
    return [int(t) for t, _ in generate_step(prompt, model, max_tokens=n, sampler=lambda lp: mx.argmax(lp, axis=-1))]


def logits(model) -> np.ndarray:
    return np.array(integration.synthetic_logits(model))


def _assert_same_tokens_or_near_tie(arch, fmt, ref_tokens, got_tokens, report, reference_model):
    if fmt == "float32" or ref_tokens == got_tokens:
        assert ref_tokens == got_tokens
        return
    # Low-precision models: tokens may part only where the unpatched model was
    # itself undecided - its top-2 logit gap within what the verification allowed.
    first = next(i for i, (a, b) in enumerate(zip(ref_tokens, got_tokens)) if a != b)
    prefix = mx.concatenate([PROMPT, mx.array(ref_tokens[:first], dtype=mx.uint32)])
    out = reference_model(prefix[None])[0, -1].astype(mx.float32)
    top2 = np.sort(np.array(out))[-2:]
    scale = float(mx.abs(out).max())
    assert top2[1] - top2[0] <= 2 * report.allowed * scale, f"{arch}/{fmt}: tokens differ at {first} without a near tie"


# every architecture in the main formats; the other affine widths and MLX's microscaling modes on
# a GQA llama and a tied qwen3
PATCHED = [(a, f) for a in ARCHS for f in FORMATS]
PATCHED += [(a, f) for a in ("llama", "qwen3") for f in ("q2g64", "q3g64", "q5g32", "q6g128-bf16")]
PATCHED += [(a, f) for a in ("llama", "qwen3") for f in ("mxfp4", "mxfp8-bf16", "nvfp4")]


@pytest.mark.parametrize("arch,fmt", PATCHED)
def test_patch_generate_and_restore(arch, fmt):
    model = make(arch, fmt)
    reference = make(arch, fmt)  # an identical, never-patched model
    before_logits = logits(model)
    before_tokens = greedy(model)
    report = mt.patch(model)
    assert report, f"{arch}/{fmt}: nothing replaced:\n{report}"
    kinds = {k for _, k in report.replaced}
    assert "qkv" in kinds
    if arch == "gemma":
        # GeGLU is not SwiGLU: verification must decline the SwiGLU fusion
        assert "mlp_swiglu" not in kinds
        assert any(k == "mlp_swiglu" and "probe: outputs differ" in why for _, k, why in report.declined)
    else:
        assert {"mlp_swiglu", "residual"} <= kinds, str(report)
    assert report.max_diff <= report.allowed
    _assert_same_tokens_or_near_tie(arch, fmt, before_tokens, greedy(model), report, reference)
    report.restore()
    np.testing.assert_array_equal(logits(model), before_logits)  # bit-identical after restore
    assert greedy(model) == before_tokens


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_speculative_and_batch_generation_agree(arch):
    model, draft = make(arch, "float32"), make(arch, "float32", seed=2)
    sampler = lambda lp: mx.argmax(lp, axis=-1)  # noqa: E731

    def speculative(m):
        return [
            int(t)
            for t, _, _ in speculative_generate_step(
                PROMPT, m, draft, num_draft_tokens=3, max_tokens=10, sampler=sampler
            )
        ]

    class Tok:
        eos_token_ids: list[int] = []

        def decode(self, ids):
            return " ".join(map(str, ids))

    prompts = [[3, 17, 42, 7], [5, 64, 12, 99, 8, 1]]

    def batch(m):
        return batch_generate(m, Tok(), prompts, max_tokens=6, return_token_ids=True).token_ids

    plain, spec, batched = greedy(model, 10), speculative(model), batch(model)
    report = mt.patch(model)
    assert report
    with mt.trace() as t:
        assert speculative(model) == spec
    assert any(r.rows > 1 and r.rows <= 32 for r in t), "the verification step should run through mlx_metile"
    assert all(r.backend == "cpu" for r in t if r.rows <= 32)
    assert batch(model) == batched
    # row invariance: verification of drafted tokens computes what plain decoding does
    assert greedy(model, 10) == plain == spec


def test_every_projection_of_up_to_32_rows_goes_through_mlx_metile():
    model = make("llama", "bfloat16")
    assert mt.patch(model)
    cache = make_prompt_cache(model)
    with mt.trace() as t:
        mx.eval(model(PROMPT[None], cache=cache))  # prefill, 8 rows
        mx.eval(model(mx.array([[4]]), cache=cache))  # decode, 1 row
        mx.eval(model(mx.array([[4, 5, 6]]), cache=cache))  # verification, 3 rows
    layers = 2
    per_forward = layers * (1 + 1 + 2) + 1  # fused qkv, o_proj, gate/up, down(+residual); lm_head
    assert len(t) == 3 * per_forward, t.summary()
    assert {r.backend for r in t} == {"cpu"}
    # both residual adds of each block run inside a projection: o_proj's and down's
    assert sum(r.residual for r in t) == 3 * layers * 2, t.summary()
    long = mx.zeros((1, 40), dtype=mx.uint32)  # 40 rows: over max_rows, stays on stock MLX
    with mt.trace() as t:
        mx.eval(model(long))
    assert all(r.backend.startswith("mlx") for r in t)


def test_wrong_replacement_is_declined(monkeypatch):
    """A deliberately wrong SwiGLU (gate and up swapped) must not survive verification."""
    original = FusedSwiGLU.__call__

    def wrong(self, x, residual=None):
        self.gate_proj, self.up_proj = self.up_proj, self.gate_proj
        try:
            return original(self, x, residual)
        finally:
            self.gate_proj, self.up_proj = self.up_proj, self.gate_proj

    monkeypatch.setattr(FusedSwiGLU, "__call__", wrong)
    _assert_declined_per_layer("mlp", "mlp_swiglu", kept=("model.layers.0.self_attn", "qkv"))


def _assert_declined_per_layer(module: str, kind: str, kept: tuple[str, str]) -> None:
    """Patching a 2-layer float32 Llama declines `kind` at model.layers.{0,1}[.module], keeps
    `kept`, and leaves the model's logits as they were (to 1e-4 of their scale)."""
    model = make("llama", "float32")
    before = logits(model)
    report = mt.patch(model)
    declined = {(p, k) for p, k, _ in report.declined}
    suffix = f".{module}" if module else ""
    assert (f"model.layers.0{suffix}", kind) in declined and (f"model.layers.1{suffix}", kind) in declined
    assert kept in set(report.replaced)
    np.testing.assert_allclose(logits(model), before, rtol=0, atol=1e-4 * np.abs(before).max())


def test_a_block_whose_attention_changes_its_output_projection_result_is_declined(monkeypatch):
    """The patched block hands its residual to the attention's o_proj; an attention that
    scales o_proj's output would then scale the residual as well: verification must
    decline the block (and keep the model's results)."""
    from mlx_lm.models import llama

    original = llama.Attention.__call__
    monkeypatch.setattr(llama.Attention, "__call__", lambda self, *a, **k: original(self, *a, **k) * 0.5)
    _assert_declined_per_layer("", "residual", kept=("model.layers.0.mlp", "mlp_swiglu"))


def test_a_kernel_wrong_only_in_one_row_calls_is_declined(monkeypatch):
    """A planted wrong kernel: the output projection's product off by 25% in calls of one row
    only (the decode steps). On a bf16 int4 model the unpatched model first runs only its batch
    piece, where no call has one row: the patched model's logits are still compared on every row,
    so the output projection is declined and everything else kept."""
    model = make("llama", "q4g64-bf16")
    plant_wrong_output_projection(monkeypatch, model)
    report = mt.patch(model)
    declined = {(p, k): why for p, k, why in report.declined}
    assert set(declined) == {("lm_head", "projection")}, str(report)
    assert declined[("lm_head", "projection")].startswith("logits differ by"), str(report)
    assert len(report.replaced) == 8 and report.max_diff <= report.allowed, str(report)
    assert type(model.lm_head) is nn.QuantizedLinear


def test_a_wrong_module_alike_to_a_probed_one_is_declined(monkeypatch):
    """Alike MLPs probe once (the first); a wrong one among the others is declined by the logits
    check: layer 1's fused MLP with gate and up swapped, layer 0's right."""
    model = make("llama", "q4g64-bf16")
    target = model.model.layers[1].mlp
    original = FusedSwiGLU.__call__

    def wrong(self, x, residual=None):
        if self.original is not target:
            return original(self, x, residual)
        self.gate_proj, self.up_proj = self.up_proj, self.gate_proj
        try:
            return original(self, x, residual)
        finally:
            self.gate_proj, self.up_proj = self.up_proj, self.gate_proj

    monkeypatch.setattr(FusedSwiGLU, "__call__", wrong)
    report = mt.patch(model)
    declined = {(p, k): why for p, k, why in report.declined}
    assert declined[("model.layers.1.mlp", "mlp_swiglu")].startswith("logits differ by"), str(report)
    assert declined[("model.layers.1", "residual")].startswith("needs mlp_swiglu"), str(report)
    assert len(declined) == 2 and ("model.layers.0.mlp", "mlp_swiglu") in report.replaced, str(report)
    assert model.model.layers[1].mlp is target


def test_a_model_that_verifies_runs_the_patched_model_once_and_reports_its_time():
    model = make("llama", "q4g64-bf16")
    report = mt.patch(model)
    assert report and not report.declined, str(report)
    assert report.runs == 1, str(report)  # every part at once, nothing bisected
    assert set(report.phases) == {"discovery", "float32 reference", "unpatched model", "probes", "patched model"}
    assert report.seconds >= sum(report.phases.values())
    assert "  time: discovery " in str(report) and "patched model" in str(report) and "(1 run)" in str(report)


def float32_logits(model) -> np.ndarray:
    """synthetic_logits of the model with its bf16/f16 parameters in float32 (MLX ops)."""
    params = model.parameters()
    up = tree_map(lambda a: a.astype(mx.float32) if a.dtype in (mx.float16, mx.bfloat16) else a, params)
    model.update(up)
    try:
        return logits(model)
    finally:
        model.update(params)


def all_parts_logits(model) -> np.ndarray:
    """synthetic_logits with every part patch finds on, unverified."""
    report = mt.patch(model, verify=False)
    try:
        return logits(model)
    finally:
        report.restore()


@pytest.mark.parametrize("fmt", ["q4g64-bf16", "bfloat16"])
def test_a_model_within_tolerance_of_float32_is_kept_without_running_the_unpatched_model(fmt):
    tolerance = 0.05
    model = make("llama", fmt)
    ref = float32_logits(model)
    d = np.abs(all_parts_logits(model) - ref).max() / np.abs(ref).max()
    assert 1e-3 < d <= tolerance  # (bf16 rounding: outside the floor, inside the tolerance)
    report = mt.patch(model, tolerance=tolerance)
    assert report.criterion == "float32" and not report.declined, str(report)
    assert "unpatched model" not in report.phases and report.runs == 1, str(report)
    assert report.allowed == tolerance + integration.F32_FLOOR
    assert report.max_diff == pytest.approx(d, rel=1e-5, abs=1e-7), str(report)
    assert "x max |float32 reference|" in str(report) and "unpatched model not run" in str(report)


@pytest.mark.parametrize("factor, kept", [(1.03, True), (1.2, False)])
def test_outside_the_float32_bound_the_unpatched_model_decides(monkeypatch, factor, kept):
    """An output projection off by `factor` in every call: beyond tolerance of the float32 logits,
    so the unpatched model runs and the bound with its own distance keeps (1.03) or declines (1.2)
    the projection, as computed here from the three models' logits."""
    tolerance, floor = 0.015, integration.F32_FLOOR
    model = make("llama", "q4g64-bf16")
    ref, before = float32_logits(model), logits(model)
    plant_output_projection_factor(monkeypatch, model, factor)
    d = np.abs(all_parts_logits(model) - ref).max()
    bound = integration.ERROR_GROWTH * np.abs(before - ref).max() + (tolerance + floor) * np.abs(before).max()
    assert d > (tolerance + floor) * np.abs(ref).max() and (d <= bound) == kept, (d, bound)
    report = mt.patch(model, tolerance=tolerance)
    assert "unpatched model" in report.phases and report.criterion in ("batch bound", "bound"), str(report)
    if kept:
        assert not report.declined and report.runs == 1, str(report)  # (the first patched run reused)
    else:
        declined = {(p, k): why for p, k, why in report.declined}
        assert set(declined) == {("lm_head", "projection")}, str(report)
        assert declined[("lm_head", "projection")].startswith("logits differ by"), str(report)
        assert report.criterion == "bound" and type(model.lm_head) is nn.QuantizedLinear, str(report)
    assert report.max_diff <= report.allowed


def test_likeness_tells_modules_apart_by_class_settings_and_shapes():
    a, b = make("llama", "q4g64"), make("llama", "q4g64", seed=2)
    like = integration.likeness
    assert like(a.model.layers[0].mlp) == like(a.model.layers[1].mlp) == like(b.model.layers[0].mlp)
    assert like(a.model.layers[0].mlp) != like(make("llama", "q4g32").model.layers[0].mlp)  # group size
    assert like(a.model.layers[0].mlp) != like(make("llama", "q4g64-bf16").model.layers[0].mlp)  # dtype
    assert like(a.model.layers[0].self_attn) != like(a.model.layers[0].mlp)
    b.model.layers[0].mlp.gate_proj.bits = 8  # (a setting, not an array)
    assert like(b.model.layers[0].mlp) != like(a.model.layers[0].mlp)


def test_patching_twice_is_harmless_and_models_are_independent():
    model, other = make("qwen2", "float32"), make("qwen2", "float32")
    first = mt.patch(model)
    after_first = logits(model)
    second = mt.patch(model)
    assert not second and not second.replaced
    assert any(why == "already patched" for _, _, why in second.declined)
    np.testing.assert_array_equal(logits(model), after_first)
    assert type(other.model.layers[0]) is not type(model.model.layers[0])
    assert isinstance(other.model.layers[0].mlp.gate_proj, nn.Linear)
    first.restore()
    np.testing.assert_array_equal(logits(model), logits(other))


def test_report_prints_and_bad_arguments():
    model = make("llama", "float32")
    report = mt.patch(model, verify=False)
    text = str(report)
    assert "replaced qkv" in text and "model.layers.0.self_attn" in text
    report.restore()
    with pytest.raises(TypeError, match="model: expected an mlx.nn.Module"):
        mt.patch(object())
    with pytest.raises(ValueError, match="tolerance: must be finite and >= 0, got -1"):
        mt.patch(model, tolerance=-1)
    with pytest.raises(ValueError, match="tolerance: must be finite and >= 0, got nan"):
        mt.patch(model, tolerance=float("nan"))
    with pytest.raises(TypeError, match="tolerance: expected a number, got str"):
        mt.patch(model, tolerance="x")
    with pytest.raises(TypeError, match="max_rows: expected an integer, got str"):
        mt.patch(model, max_rows="a")
    with pytest.raises(ValueError, match="max_rows: must be >= 1, got 0"):
        mt.patch(model, max_rows=0)


@pytest.mark.parametrize("fmt", ["float32", "q4g64"])
def test_parameter_updates_reach_the_kernels_and_survive_restore(fmt):
    """model.update() on a patched model reaches the arrays the kernels read (the replacements
    mirror them; the weights built from them are rebuilt when they change), and restore()
    hands the updated arrays back to the original modules."""
    updated, patched = make("llama", fmt), make("llama", fmt)
    report = mt.patch(patched)
    assert report
    new = tree_map(lambda p: p * 2 if p.dtype == mx.float32 else p, updated.parameters())
    updated.update(new)
    before = logits(patched)
    patched.update(tree_map(lambda p: p, new))
    want = logits(updated)
    got = logits(patched)
    assert np.abs(got - before).max() > 0.1 * np.abs(want).max()  # the update changed the outputs
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4 * np.abs(want).max())
    long = mx.arange(40, dtype=mx.uint32)[None] % 128  # more than max_rows: the original modules run
    want_long = np.array(updated(long).astype(mx.float32))
    got_long = np.array(patched(long).astype(mx.float32))
    np.testing.assert_allclose(got_long, want_long, rtol=0, atol=1e-4 * np.abs(want_long).max())
    report.restore()
    np.testing.assert_array_equal(logits(patched), want)


def test_weights_are_built_once_per_array_set(monkeypatch):
    """Repeated calls reuse each projection's weights (integrations.modules.ProjectionCache)."""
    model = make("llama", "q4g64")
    assert mt.patch(model)
    built = []
    original = modules.weight_of
    monkeypatch.setattr(modules, "weight_of", lambda *a: built.append(1) or original(*a))
    for _ in range(3):
        logits(model)
    assert built == []  # all built during patch's verification


def test_a_projection_module_swapped_in_reaches_the_kernels():
    """Replacing a whole projection under a patched MLP (not only its arrays) makes the fused
    call use the new module's weights (ProjectionCache notices the new module and its arrays)."""
    patched, reference = make("llama", "float32"), make("llama", "float32")
    assert mt.patch(patched)
    other = make("llama", "float32", seed=5).model.layers[0].mlp.up_proj
    before = logits(patched)
    patched.model.layers[0].mlp.up_proj = other
    reference.model.layers[0].mlp.up_proj = other
    want, got = logits(reference), logits(patched)
    assert np.abs(got - before).max() > 0.1 * np.abs(want).max()  # the swap changed the outputs
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4 * np.abs(want).max())
    long = mx.arange(40, dtype=mx.uint32)[None] % 128  # more than max_rows: the original MLP runs
    want_long = np.array(reference(long).astype(mx.float32))
    got_long = np.array(patched(long).astype(mx.float32))
    np.testing.assert_allclose(got_long, want_long, rtol=0, atol=1e-4 * np.abs(want_long).max())


def test_arrays_set_on_a_fused_mlps_projections_reach_the_kernels():
    """An array assigned straight onto a projection under a patched MLP - one of the originals,
    or one swapped in after patching - reaches the fused kernels (the MLP watches its projections:
    modules._VERSION), the projections keep their types for isinstance, and restore() gives them
    their own classes back."""
    patched, reference = make("llama", "float32"), make("llama", "float32")
    report = mt.patch(patched)
    assert report
    mlp, ref_mlp = patched.model.layers[0].mlp, reference.model.layers[0].mlp
    assert isinstance(mlp.gate_proj, nn.Linear) and type(mlp.gate_proj) is not nn.Linear
    for proj, ref in ((mlp.gate_proj, ref_mlp.gate_proj), (mlp.down_proj, ref_mlp.down_proj)):
        before = logits(patched)
        proj.weight = proj.weight * -1.5
        ref.weight = ref.weight * -1.5
        want, got = logits(reference), logits(patched)
        assert np.abs(got - before).max() > 0.1 * np.abs(want).max()  # the assignment changed the outputs
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-4 * np.abs(want).max())
    other = make("llama", "float32", seed=5).model.layers[0].mlp.up_proj
    mlp.up_proj = other
    ref_mlp.up_proj = other
    logits(patched)  # (the new module's weights built)
    other.weight = other.weight * 3.0  # one object, under both models
    want, got = logits(reference), logits(patched)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4 * np.abs(want).max())
    report.restore()
    restored = patched.model.layers[0].mlp
    assert restored.up_proj is other  # (restore carries the swapped-in projection back)
    assert all(type(m) is nn.Linear for m in (restored.gate_proj, restored.up_proj, restored.down_proj))
    np.testing.assert_array_equal(logits(patched), want)


def test_default_max_rows_by_backend_and_format(monkeypatch):
    """32 rows on the CPU; on MLX's CUDA backend 32 for quantized models and 4 for dense ones
    (the H200 end-to-end measurements in default_max_rows' docstring)."""
    from mlx_metile import dispatch
    from mlx_metile.integrations import mlx_lm as integration

    quantized, dense = make("llama", "q4g64"), make("llama", "bfloat16")
    assert integration.default_max_rows(quantized) == integration.default_max_rows(dense) == 32
    monkeypatch.setattr(mx, "default_device", lambda: mx.Device(mx.DeviceType.gpu))
    monkeypatch.setattr(dispatch, "gpu_backend", lambda: "cuda")
    assert integration.default_max_rows(quantized) == 32
    assert integration.default_max_rows(dense) == 4
    assert integration.default_max_rows() == 4


def test_dense_projections_stay_stock_on_cuda_unless_asked(monkeypatch):
    """On MLX's CUDA backend patch leaves dense projections to stock MLX by default (listing
    each declined group with the reason) and replaces them with dense=True; quantized models
    are patched as before; elsewhere dense projections are replaced by default."""
    from mlx_metile import dispatch
    from mlx_metile.integrations import mlx_lm as integration

    assert integration.default_dense()
    monkeypatch.setattr(mx, "default_device", lambda: mx.Device(mx.DeviceType.gpu))
    monkeypatch.setattr(dispatch, "gpu_backend", lambda: "cuda")
    assert not integration.default_dense()
    dense = make("llama", "bfloat16")
    report = mt.patch(dense, verify=False)
    assert not report and not report.replaced
    reasons = {kind: why for _, kind, why in report.declined}
    assert {"qkv", "mlp_swiglu", "projection"} <= set(reasons), report.declined
    assert all(why == integration.DENSE_DECLINED for why in reasons.values())
    report = mt.patch(make("llama", "bfloat16"), verify=False, dense=True)
    assert {"qkv", "mlp_swiglu", "residual"} <= {kind for _, kind in report.replaced}
    report = mt.patch(make("llama", "q4g64"), verify=False)
    assert {"qkv", "mlp_swiglu", "residual"} <= {kind for _, kind in report.replaced}
    with pytest.raises(TypeError, match="dense: expected True, False or None"):
        mt.patch(make("llama", "bfloat16"), dense="no")


def test_a_failed_attention_leaves_no_residual_pending(monkeypatch):
    """The residual handed to o_proj for one block call must not reach a later o_proj call when
    the attention raises before using it."""
    from mlx_lm.models import llama

    model = make("llama", "q4g64")
    assert mt.patch(model, fuse_norms=True)
    block = model.model.layers[0]
    o_proj = block.self_attn.o_proj
    assert type(o_proj).__name__ == "MetileProjection"
    monkeypatch.setattr(llama.Attention, "__call__", lambda self, *a, **k: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        block(mx.zeros((1, 2, block.input_layernorm.weight.shape[0]), mx.bfloat16))
    assert o_proj.residual_next is None
    assert block.self_attn.q_proj.group.norm_next is None  # nor an announced input norm


def test_the_input_norm_goes_into_qkv_and_the_attention_still_gets_its_output(monkeypatch):
    """With fuse_norms=True a patched block hands its input RMSNorm to the fused q/k/v call (the group's Projection
    carries the norm and reads the block's input), while the attention itself still receives
    the normalised x: an attention that also adds x to its output computes what the
    unpatched model does, within patch's verified tolerance."""
    from mlx_lm.models import llama

    plain = llama.Attention.__call__
    monkeypatch.setattr(llama.Attention, "__call__", lambda self, x, *a, **k: plain(self, x, *a, **k) + x)
    model, reference = make("llama", "q4g64-bf16"), make("llama", "q4g64-bf16")
    report = mt.patch(model, fuse_norms=True)
    assert {"qkv", "residual"} <= {kind for _, kind in report.replaced}, str(report)
    block = model.model.layers[0]
    group = block.self_attn.q_proj.group
    got, want = integration.synthetic_logits(model), integration.synthetic_logits(reference)
    projection = group.projection.projection
    assert projection.norm is not None and projection.norm[0] is block.input_layernorm.weight
    assert projection.norm[1] == block.input_layernorm.eps and group.norm_next is None
    scale = float(mx.abs(want).max())
    err = float(mx.abs(got - want).max())
    assert err <= 2 * report.allowed * scale, f"logits differ by {err:.3g} (scale {scale:.3g})"


def test_the_norms_stay_separate_ops_unless_fuse_norms_is_set():
    """patch's default (fuse_norms=False): the q/k/v Projection is not given the input norm (it is
    with fuse_norms=True; gate/up never is: schedule.norm_pays), both models verify, and the argument
    is checked by name."""
    fused, apart = make("llama", "q4g64-bf16"), make("llama", "q4g64-bf16")
    assert mt.patch(fused, fuse_norms=True) and mt.patch(apart)
    for model, with_norm in ((fused, True), (apart, False)):
        integration.synthetic_logits(model)
        layer = model.model.layers[0]
        projections = (layer.self_attn.q_proj.group.projection.projection, layer.mlp.gate_up.projection)
        assert [p.norm is not None for p in projections] == [with_norm, False]  # (gate/up: schedule.norm_pays)
    with pytest.raises(TypeError, match="fuse_norms: expected True or False"):
        mt.patch(make("llama", "q4g64"), fuse_norms="yes")


def test_the_report_names_each_replaced_layer_s_format():
    model = make("qwen3", "q3g64")
    report = mt.patch(model)
    assert report.formats and set(report.formats.values()) == {"q3g64"}
    assert {(p, k) for p, k in report.replaced} == set(report.formats)
    assert "replaced tied_output  model.embed_tokens (q3g64)" in str(report)


@pytest.mark.parametrize("mode", ["mxfp4", "mxfp8", "nvfp4"])
def test_microscaling_models_are_replaced_and_reported_by_format(mode):
    model = make("qwen3", mode)  # (tied embeddings: the output projection too)
    before = logits(model)
    report = mt.patch(model)
    assert report and not report.declined, str(report)
    assert set(report.formats.values()) == {mode}, report.formats
    assert f"replaced tied_output  model.embed_tokens ({mode})" in str(report)
    patched = logits(model)
    np.testing.assert_allclose(patched, before, atol=report.allowed * np.abs(before).max())
    report.restore()
    np.testing.assert_array_equal(logits(model), before)
