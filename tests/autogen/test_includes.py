"""What tg-autogen binds from headers a target includes: umbrella headers, constants and enums used from included
headers, and extern variables."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.autogen.conftest import load_module
from tg.autogen.cli import app

runner = CliRunner()


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def gen_module(tmp_path: Path, header: Path, *extra: str):
    out = tmp_path / f"{header.stem}_bound.py"
    result = runner.invoke(app, ["gen", str(header), "-o", str(out), *extra])
    assert result.exit_code == 0, result.output
    return load_module(out), result.stderr


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """An umbrella api.h over api/core.h (a struct, a function) and api/more.h, itself an umbrella over api/kinds.h."""
    write(tmp_path / "inc/api/core.h", "struct api_point { int x, y; };\nint api_norm(struct api_point *p);\n")
    write(tmp_path / "inc/api/kinds.h", "enum api_kind { API_ONE = 1, API_TWO = 2 };\n#define API_LIMIT 64\n")
    write(tmp_path / "inc/api/more.h", '#ifndef MORE_H\n#define MORE_H\n#include "kinds.h"\n#endif\n')
    write(tmp_path / "elsewhere/outside.h", "#define OUTSIDE_VALUE 5\n")
    umbrella = '#ifndef API_H\n#define API_H\n#include "api/core.h"\n#include "api/more.h"\n'
    umbrella += '#include "../elsewhere/outside.h"\n#include <stddef.h>\n#endif\n'
    return write(tmp_path / "inc/api.h", umbrella)


def test_an_umbrella_header_binds_the_headers_it_includes_from_its_folder(tmp_path: Path, project: Path) -> None:
    module, stderr = gen_module(tmp_path, project)
    assert module.struct_api_point(3, 4).y == 4
    assert (module.API_ONE, module.API_TWO, module.API_LIMIT) == (1, 2, 64)  # through the nested umbrella more.h
    assert "api.h declares nothing itself" in stderr and "api/core.h" in stderr
    # a header from another folder stays out, with a note naming it
    assert not hasattr(module, "OUTSIDE_VALUE")
    assert "includes from other folders, not bound" in stderr and "elsewhere/outside.h" in stderr


def test_an_umbrella_of_headers_from_other_folders_fails_and_names_them(tmp_path: Path) -> None:
    write(tmp_path / "lib/real.h", "struct real { int a; };\n")
    umbrella = write(tmp_path / "inc/umbrella.h", '#ifndef U_H\n#define U_H\n#include "../lib/real.h"\n#endif\n')
    result = runner.invoke(app, ["gen", str(umbrella)])
    assert result.exit_code == 1
    assert "declares nothing itself and includes only headers from other folders" in result.stderr
    assert str((tmp_path / "lib/real.h").resolve()) in result.stderr


def test_a_header_with_declarations_is_not_an_umbrella(tmp_path: Path) -> None:
    write(tmp_path / "inc/dep/side.h", "struct side { int s; };\n")
    header = write(tmp_path / "inc/main.h", '#include "dep/side.h"\nstruct mine { int m; };\n')
    module, stderr = gen_module(tmp_path, header)
    assert hasattr(module, "struct_mine") and not hasattr(module, "struct_side")
    assert "declares nothing itself" not in stderr


@pytest.mark.skipif(not Path("/usr/include/CL/opencl.h").is_file(), reason="opencl-headers not installed")
def test_the_opencl_umbrella_binds_cl_h_and_its_extensions(tmp_path: Path) -> None:
    module, _ = gen_module(
        tmp_path, Path("/usr/include/CL/opencl.h"), "--lib", "OpenCL", "-D", "CL_TARGET_OPENCL_VERSION=300"
    )
    assert module.CL_SUCCESS == 0 and module.CL_DEVICE_NOT_FOUND == -1  # cl.h
    assert module.CL_GL_CONTEXT_KHR == 0x2008  # cl_gl.h
    assert callable(module.clGetPlatformIDs)  # bound lazily: importing needs no libOpenCL


# ---------------------------------------------------------------------------------------------------------------
# constants and enums of included headers that a target uses


@pytest.fixture
def uses_included(tmp_path: Path) -> Path:
    """main.h declares its own names from an included header's enum and macros (a header with declarations is no
    umbrella, so the included header itself is not bound)."""
    write(
        tmp_path / "dep/theirs.h",
        "enum their_kind { THEIR_A = 3, THEIR_B = 9 };\nenum unused_kind { UNUSED_X = 1 };\n"
        "#define THEIR_BASE 0x40\n#define THEIR_FLAG (THEIR_BASE | 1)\n#define THEIR_SHIFT 4\n#define THEIR_OTHER 77\n",
    )
    header = '#include "../dep/theirs.h"\nstruct holder { enum their_kind kind; int n; };\n'
    header += "#define MY_FLAG (THEIR_FLAG | 4)\n#define MY_SCALE(x) ((x) << THEIR_SHIFT)\n"
    header += "static const int my_kind = THEIR_B;\n"
    return write(tmp_path / "inc/main.h", header)


def test_macros_and_constants_naming_an_included_header_bind_what_they_use(tmp_path: Path, uses_included: Path) -> None:
    module, stderr = gen_module(tmp_path, uses_included)
    assert module.MY_FLAG == 0x45 and module.THEIR_FLAG == 0x41 and module.THEIR_BASE == 0x40  # the chain too
    assert module.MY_SCALE(2) == 32  # a macro function whose body names an included macro
    assert module.my_kind == 9
    assert not hasattr(module, "THEIR_OTHER") and not hasattr(module, "UNUSED_X")  # only what is used
    assert "bound from included headers, as the targets use them" in stderr


def test_an_enum_type_of_an_included_header_brings_its_constants(tmp_path: Path, uses_included: Path) -> None:
    module, _ = gen_module(tmp_path, uses_included)
    holder = module.struct_holder(kind=module.THEIR_A, n=1)
    assert (holder.kind, module.THEIR_B) == (3, 9)
    assert module.enum_their_kind is not None


# ---------------------------------------------------------------------------------------------------------------
# extern variables

VARIABLES_HEADER = """
extern int counter;
extern const char *greeting;
extern int table[3];
struct pair { int a, b; };
extern struct pair origin;
int read_counter(void);
"""
VARIABLES_SOURCE = """
int counter = 3;
const char *greeting = "hello";
int table[3] = {4, 5, 6};
struct pair origin = {7, 8};
int read_counter(void) { return counter; }
"""


def test_extern_variables_are_bound_to_the_librarys_memory(bind) -> None:
    module = bind(VARIABLES_HEADER, VARIABLES_SOURCE).module
    assert module.counter.value == 3 and module.greeting.value == b"hello"
    assert list(module.table) == [4, 5, 6] and (module.origin.a, module.origin.b) == (7, 8)
    module.counter.value = 41  # writes the C variable: the library's own function sees it
    assert module.read_counter() == 41


def test_extern_variables_need_no_library_to_import(tmp_path: Path, bind, monkeypatch) -> None:
    bound = bind(VARIABLES_HEADER, VARIABLES_SOURCE)
    for name in [n for n in os.environ if n.startswith("TGTEST") and n.endswith("_PATH")]:
        monkeypatch.delenv(name)
    module = load_module(Path(bound.module.__file__))  # a fresh import, with the library nowhere to be found
    with pytest.raises(OSError, match="cannot find library"):
        module.counter  # noqa: B018  # the lookup happens on use
    with pytest.raises(AttributeError):
        module.no_such_variable  # noqa: B018


def test_extern_variables_without_a_library_are_skipped_with_the_reason(bind) -> None:
    bound = bind("extern int counter;\nstruct keep { int k; };\n")
    assert "counter" in bound.skipped_names
    reason = next(s.reason for s in bound.generated.skipped if s.name == "counter")
    assert "needs a library (--lib)" in reason
