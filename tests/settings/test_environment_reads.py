"""The environment is read in mlx_metile/settings.py and nowhere else: no other module of the
package (nor the kernels it installs) touches os.environ / os.getenv / os.putenv, and the C++
sources call no getenv."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PYTHON_ROOTS = [ROOT / "mlx_metile", ROOT / "kernels"]  # kernels/ installs as mlx_metile.kernels
ALLOWED = ROOT / "mlx_metile" / "settings.py"
ENV_NAMES = {"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"}
OS_MODULES = {"os", "posix", "nt"}
CPP_SUFFIXES = {".c", ".cc", ".cpp", ".cu", ".h", ".hpp", ".mm"}


def environment_reads(source: str) -> list[str]:
    """`line: text` of every use of the environment through the os module in Python source."""
    tree = ast.parse(source)
    aliases = set()  # names the os module is bound to
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases |= {a.asname or a.name for a in node.names if a.name in OS_MODULES}
        elif isinstance(node, ast.ImportFrom) and node.module in OS_MODULES:
            found += [f"{node.lineno}: from {node.module} import {a.name}" for a in node.names if a.name in ENV_NAMES]
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ENV_NAMES:
            if isinstance(node.value, ast.Name) and node.value.id in aliases:
                found.append(f"{node.lineno}: {node.value.id}.{node.attr}")
    return found


def _python_files() -> list[Path]:
    return sorted(p for root in PYTHON_ROOTS for p in root.rglob("*.py"))


def test_the_scan_finds_reads():
    # the check below can fail: it sees settings.py's reads, and every spelling it looks for
    assert environment_reads(ALLOWED.read_text())
    spellings = "import os as o\nfrom os import getenv\no.environ.get('A')\nos.putenv('A', '1')\n"
    assert len(environment_reads(spellings)) == 2  # (os itself is not imported in this text)
    assert len(environment_reads("import os\n" + spellings)) == 3


def test_no_module_but_settings_reads_the_environment():
    files = _python_files()
    assert ALLOWED in files and len(files) > 20
    offenders = {
        str(p.relative_to(ROOT)): reads
        for p in files
        if p != ALLOWED
        for reads in [environment_reads(p.read_text())]
        if reads
    }
    assert not offenders, f"read the environment outside mlx_metile/settings.py: {offenders}"


def _code(text: str) -> str:
    """C / C++ text without its comments and string literals."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    return re.sub(r'"(?:\\.|[^"\\\n])*"', '""', text)


def test_no_cpp_source_calls_getenv():
    files = [p for root in (ROOT / "src", ROOT / "mlx_metile") for p in root.rglob("*") if p.suffix in CPP_SUFFIXES]
    assert any(p.parent.name == "src" for p in files)
    call = re.compile(r"\b(?:secure_)?getenv\s*\(|\benviron\b")
    assert call.search(_code('int main() { return std::getenv("X") != 0; }'))
    assert not call.search(_code('// getenv("X")\nconst char* s = "getenv(";'))
    offenders = [str(p.relative_to(ROOT)) for p in files if call.search(_code(p.read_text(errors="replace")))]
    assert not offenders, f"C++ reading the environment: {offenders}"
