"""mlx_metile.settings: every declared variable takes its documented values and refuses others
with a ValueError naming it; override() and reload(); unknown() for misspelled names."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mlx_metile import settings
from mlx_metile.settings import DECLARED, MMA_KNOBS, Settings, parse

P = settings.PREFIX

BOOLEANS = ["EMULATE", "CUDA_GRADIENTS", "CUDA_NATIVE_LAUNCH", "CUDA_PRIMITIVE", "CUDA_MMA", "CUDA_MMA_FUSED"]
BOOLEANS += ["CUDA_MMA_STAGED", "CUDA_MMA_STAGED_LOWBIT", "PATCHED_ARCHIVES", "VERIFY_RECORD"]
TRUE_WORDS = ["1", "true", "yes", "on", "TRUE", "On", " yes "]
FALSE_WORDS = ["0", "false", "no", "off", "False", "OFF"]
COUNTS = ["CUDA_MAX_ROWS", "CUDA_POOL_MB"]  # whole numbers >= 0
CHOICES = {
    "CUDA_COMPILER": ("nvcc", "nvrtc"),
    "CUDA_BINARY": ("cubin", "fatbin"),
    "CUDA_MMA_DENSE": ("0", "1", "staged"),
    "METAL_SCHEDULE": ("simdgroup", "nax_direct", "nax_staged"),
}
EXECUTABLES = ["CLANG", "NVCC"]
PATHS = ["CACHE", "NVRTC", "CUDA_INCLUDE", "TUNE_STORE", *EXECUTABLES]
OTHERS = ["DEBUG", "CUDA_TUNE", "CUDA_ARCH", "CUDA_DECISIONS"]
KNOBS = {f"CUDA_MMA_{k.upper()}": k for k in MMA_KNOBS}


def value_of(cfg: Settings, short: str):
    """The parsed value of MLX_METILE_<short> in `cfg`."""
    if short in KNOBS:
        return cfg.knob(KNOBS[short])
    return getattr(cfg, short.lower())


def parsed(short: str, raw: str):
    return value_of(parse({P + short: raw}), short)


def refused(short: str, raw: str, reason: str = "") -> str:
    """The message parse() refuses `raw` for MLX_METILE_<short> with; it names the variable."""
    with pytest.raises(ValueError) as info:
        parse({P + short: raw})
    message = str(info.value)
    assert message.startswith(P + short + ":"), message
    assert reason in message, message
    return message


def test_every_declared_setting_is_tested_here():
    tested = BOOLEANS + COUNTS + list(CHOICES) + PATHS + OTHERS + list(KNOBS)
    assert sorted(P + n for n in tested) == sorted(DECLARED)


def test_unset_and_empty_values_give_the_declared_defaults():
    defaults = parse({})
    assert defaults == Settings()
    for name, setting in DECLARED.items():
        short = name[len(P) :]
        assert value_of(defaults, short) == setting.default, name
        assert parse({name: ""}) == defaults, name  # an empty variable is an unset one


@pytest.mark.parametrize("short", BOOLEANS)
def test_booleans(short):
    for word in TRUE_WORDS:
        assert parsed(short, word) is True, word
    for word in FALSE_WORDS:
        assert parsed(short, word) is False, word
    for bad in ("maybe", "2", "y", "enabled", "-1"):
        refused(short, bad, "0/1/true/false/yes/no/on/off")


@pytest.mark.parametrize("short", COUNTS)
def test_counts(short):
    for raw, want in (("0", 0), ("1", 1), ("32", 32), ("4096", 4096)):
        assert parsed(short, raw) == want
    for bad in ("-1", "3.5", "x", "1e3", "0x10", "many"):
        refused(short, bad, "a whole number >= 0")


@pytest.mark.parametrize("short", list(CHOICES))
def test_choices(short):
    for raw in CHOICES[short]:
        assert parsed(short, raw) == raw
    for bad in ("other", CHOICES[short][-1].upper(), "3"):  # (choices are case-sensitive)
        refused(short, bad, "one of " + ", ".join(CHOICES[short]))
    assert parsed(short, f" {CHOICES[short][0]}\t") == CHOICES[short][0]  # surrounding blanks, as counts


@pytest.mark.parametrize("short", list(KNOBS))
def test_mma_knobs_take_exactly_their_values(short):
    allowed = MMA_KNOBS[KNOBS[short]]
    for v in allowed:
        assert parsed(short, str(v)) == v
    outside = {min(allowed) - 1, max(allowed) + 1} | (set(range(min(allowed), max(allowed))) - set(allowed))
    for v in sorted(outside):
        refused(short, str(v), "expected one of")
    for bad in ("x", "1.0", "two"):
        refused(short, bad, "expected one of")
    assert parsed(short, f" {allowed[0]} ") == allowed[0]  # surrounding blanks, as counts


def test_knobs_are_none_where_unset_and_kept_apart():
    cfg = parse({P + "CUDA_MMA_STAGES": "3", P + "CUDA_MMA_WARPS": "8"})
    assert cfg.knob("stages") == 3 and cfg.knob("warps") == 8 and cfg.knob("batch") is None
    assert cfg.mma == (("stages", 3), ("warps", 8))  # sorted pairs: a hashable key of the schedule cache


def test_debug_stages():
    assert parsed("DEBUG", "ir") == frozenset({"ir"})
    assert parsed("DEBUG", "schedule, cuda ,trace") == frozenset({"schedule", "cuda", "trace"})
    cfg = parse({P + "DEBUG": "all"})
    assert all(cfg.debugging(s) for s in ("ir", "schedule", "msl", "cuda", "trace"))
    assert not parse({P + "DEBUG": "ir"}).debugging("msl")
    for bad in ("bogus", "ir,bogus", "IR"):
        refused("DEBUG", bad, "comma-separated list")


def test_cuda_tune():
    cfg = parse({P + "CUDA_TUNE": "sg=4,budget=48,nc=4"})
    assert cfg.cuda_tune == (("budget", 48), ("nc", 4), ("sg", 4))
    assert (cfg.tune("sg"), cfg.tune("budget"), cfg.tune("nc")) == (4, 48, 4)
    assert parse({}).tune("sg") is None
    for bad in ("sg=0", "foo=1", "sg", "sg=x", "sg=-2"):
        refused("CUDA_TUNE", bad, "cannot use")
    refused("CUDA_TUNE", "sg=33", "at most 32")


def test_cuda_arch_pattern():
    for good in ("sm_75", "sm_80", "sm_90", "sm_90a", "sm_100", "sm_120", "compute_80", "compute_90a"):
        assert parsed("CUDA_ARCH", good) == good
    for bad in ("90", "sm90", "sm_", "SM_90", "compute", "sm_90 beta", "-sm_90", "sm_90ab", "gfx90a"):
        refused("CUDA_ARCH", bad, "sm_NN or compute_NN")


def _program(path: Path, mode: int = 0o755) -> Path:
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(mode)
    return path


@pytest.mark.parametrize("short", EXECUTABLES)
def test_programs_must_be_executable_regular_files(short, tmp_path, monkeypatch):
    tool = _program(tmp_path / "tool")
    assert parsed(short, str(tool)) == str(tool)
    monkeypatch.setenv("PATH", str(tmp_path))  # a bare name is looked up on PATH
    assert parsed(short, "tool") == str(tool)
    refused(short, str(tmp_path), "is not a file")
    refused(short, "/nonexistent", "does not exist")
    refused(short, str(_program(tmp_path / "plain", 0o644)), "is not executable")
    refused(short, "-v", "not an option")


def test_nvrtc_must_be_an_existing_file(tmp_path):
    lib = tmp_path / "libnvrtc.so"
    lib.write_bytes(b"\x7fELF")
    assert parsed("NVRTC", str(lib)) == str(lib)
    for bad in (str(tmp_path), str(tmp_path / "missing.so"), "-lnvrtc"):
        refused("NVRTC", bad, "the path of an existing file")


def test_cuda_include_must_be_an_existing_directory(tmp_path):
    assert parsed("CUDA_INCLUDE", str(tmp_path)) == str(tmp_path)
    header = tmp_path / "cuda_fp16.h"
    header.write_text("")
    for bad in (str(header), str(tmp_path / "missing"), "-I/usr/include"):
        refused("CUDA_INCLUDE", bad, "an existing directory")


def test_cache_is_a_directory_that_need_not_exist(tmp_path):
    assert parsed("CACHE", str(tmp_path)) == tmp_path
    assert parsed("CACHE", str(tmp_path / "new" / "dir")) == tmp_path / "new" / "dir"
    assert parsed("CACHE", "~/metile-cache") == Path.home() / "metile-cache"
    assert parse({P + "CACHE": str(tmp_path)}).cache_root == tmp_path
    refused("CACHE", "-rf", "a directory path")
    refused("CACHE", "a\0b", "a directory path")
    plain = tmp_path / "file"
    plain.write_text("")
    refused("CACHE", str(plain), "exists and is not a directory")


def test_tune_store_is_a_file_that_need_not_exist(tmp_path):
    assert parsed("TUNE_STORE", str(tmp_path / "new" / "d.sqlite3")) == tmp_path / "new" / "d.sqlite3"
    assert parse({P + "TUNE_STORE": str(tmp_path / "d.db")}).tune_store_path == tmp_path / "d.db"
    assert parse({P + "CACHE": str(tmp_path)}).tune_store_path == tmp_path / "tune" / "decisions.sqlite3"
    refused("TUNE_STORE", str(tmp_path), "is a directory, not a file")
    refused("TUNE_STORE", "-x", "a file path")
    refused("TUNE_STORE", str(tmp_path) + "/", "a file path")


def test_cuda_decisions_is_an_existing_file_or_off(tmp_path):
    f = tmp_path / "d.json"
    f.write_text("{}")
    assert parsed("CUDA_DECISIONS", str(f)) == str(f)
    assert parsed("CUDA_DECISIONS", "off") == parsed("CUDA_DECISIONS", "0") == ""
    assert parse({}).cuda_decisions is None
    refused("CUDA_DECISIONS", str(tmp_path / "absent.json"), "existing file")
    refused("CUDA_DECISIONS", str(tmp_path), "existing file")


def test_cache_root_without_the_setting_follows_xdg(tmp_path):
    assert parse({"XDG_CACHE_HOME": str(tmp_path)}).cache_root == tmp_path / "mlx_metile"
    assert parse({}).cache_root == Path.home() / ".cache" / "mlx_metile"


@pytest.mark.parametrize("name", sorted(DECLARED))
def test_a_huge_bad_value_is_cut_in_the_message(name):
    # (a leading "-" is refused by every setting, paths included: it reads as an option)
    message = refused(name[len(P) :], "-" + "z" * 99_999)
    assert len(message) < 300 and "..." in message, message[:300]


@pytest.mark.parametrize("short", PATHS)
def test_a_huge_path_is_refused_with_a_value_error(short):
    message = refused(short, "z" * 100_000)
    assert len(message) < 300


@pytest.mark.parametrize("short,raw", [("CUDA_MAX_ROWS", "²"), ("CUDA_MMA_STAGES", "²"), ("CUDA_TUNE", "sg=²")])
def test_digits_int_cannot_read_are_refused_by_name(short, raw):
    refused(short, raw)


def test_cuda_arch_with_a_trailing_newline_is_refused():
    refused("CUDA_ARCH", "sm_90\n", "sm_NN or compute_NN")


def test_unknown_lists_misspelled_names():
    environ = {
        P + "EMULATE": "1",
        P + "EMULTE": "1",
        P + "CUDA_MMA_STAGE": "3",
        P + "cuda_max_rows": "4",
        "MLX_METILEX": "1",
        "PATH": "/usr/bin",
    }
    assert settings.unknown(environ) == [P + "CUDA_MMA_STAGE", P + "EMULTE", P + "cuda_max_rows"]
    assert settings.unknown({n: "" for n in DECLARED}) == []


def test_describe_lists_every_setting_once():
    lines = settings.describe().splitlines()
    assert sorted(line.split()[0] for line in lines) == sorted(DECLARED)


def test_reload_picks_up_changes(env, monkeypatch):
    name = P + "CUDA_MAX_ROWS"
    env.set(name, "5")
    before, generation = settings.current(), settings.generation()
    assert before.cuda_max_rows == 5
    # the environment changed behind the settings' back: nothing is re-read until reload()
    monkeypatch.setenv(name, "6")
    assert settings.current() is before and settings.generation() == generation
    assert settings.reload().cuda_max_rows == 6 and settings.current().cuda_max_rows == 6
    assert settings.generation() == generation + 1
    monkeypatch.setenv(name, "six")
    with pytest.raises(ValueError, match=name):
        settings.reload()


def test_override_restores_the_environment_and_the_settings(env):
    rows, stages = P + "CUDA_MAX_ROWS", P + "CUDA_MMA_STAGES"
    env.unset(rows)
    env.set(stages, "3")
    before = settings.current()
    with settings.override(CUDA_MAX_ROWS="7", MLX_METILE_CUDA_MMA_STAGES=None) as cfg:
        assert cfg is settings.current()
        assert cfg.cuda_max_rows == 7 and cfg.knob("stages") is None
        assert os.environ[rows] == "7" and stages not in os.environ
    assert rows not in os.environ and os.environ[stages] == "3"
    assert settings.current() == before and settings.current().knob("stages") == 3

    with pytest.raises(RuntimeError, match="inside"):
        with settings.override(CUDA_MAX_ROWS="9"):
            raise RuntimeError("inside")
    assert rows not in os.environ and settings.current() == before

    with pytest.raises(ValueError, match=rows):  # a bad value: refused, and nothing left behind
        with settings.override(CUDA_MAX_ROWS="x"):
            pass
    assert rows not in os.environ and settings.current() == before

    with pytest.raises(ValueError, match="MLX_METILE_CUDA_MAX_ROW: not a setting"):
        with settings.override(CUDA_MAX_ROW="1"):
            pass
    assert "MLX_METILE_CUDA_MAX_ROW" not in os.environ


def test_override_takes_the_external_variables(env, tmp_path):
    with settings.override(CACHE=None, XDG_CACHE_HOME=str(tmp_path)) as cfg:
        assert cfg.cache_root == tmp_path / "mlx_metile"
    assert settings.current().cache_root != tmp_path / "mlx_metile"
