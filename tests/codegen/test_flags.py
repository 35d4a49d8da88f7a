import pytest

from tg.codegen.flags import DEBUG, FLAGS, Context, describe_flags, flag


def test_context_overrides_and_restores() -> None:
    before = DEBUG.value
    with Context(DEBUG=4):
        assert DEBUG.value == 4 and DEBUG >= 2
        with Context(DEBUG=1):
            assert DEBUG.value == 1
        assert DEBUG.value == 4
    assert DEBUG.value == before


def test_unknown_flag_in_context_is_an_error() -> None:
    with pytest.raises(KeyError, match="NOT_A_FLAG"), Context(NOT_A_FLAG=1):
        pass


def test_flag_reads_environment_with_its_type(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TG_TEST_FLAG_INT", "7")
    f = flag("TG_TEST_FLAG_INT", 0, "a test flag")
    try:
        assert f.value == 7 and int(f) == 7
    finally:
        del FLAGS["TG_TEST_FLAG_INT"]


def test_non_integer_value_for_integer_flag_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TG_TEST_FLAG_BAD", "lots")
    f = flag("TG_TEST_FLAG_BAD", 0, "a test flag")
    try:
        with pytest.raises(ValueError, match="TG_TEST_FLAG_BAD='lots' must be an integer"):
            _ = f.value
    finally:
        del FLAGS["TG_TEST_FLAG_BAD"]


def test_every_flag_is_described() -> None:
    listing = describe_flags()
    for name, registered in FLAGS.items():
        assert registered.description and name in listing


def test_describe_flags_lists_the_flags_of_every_package_from_the_base_alone() -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from tg.codegen.flags import describe_flags\n"
        "print(' '.join(line.split()[0] for line in describe_flags().splitlines()))\n"
    )
    listed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    for name in ("DEBUG", "NOOPT", "CPU_COUNT", "PROFILE", "PROGRAM_CACHE_SIZE", "DEFAULT_FLOAT"):
        assert name in listed


def test_context_finds_a_flag_of_a_package_not_imported_yet() -> None:
    import subprocess
    import sys

    code = "from tg.codegen.flags import Context\nwith Context(CPU_COUNT=3):\n    print('ok')\n"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "ok\n"


def test_a_flag_set_to_the_empty_string_reads_as_its_default(monkeypatch) -> None:  # noqa: ANN001
    """`DEBUG=` means unset (the tools used to read it that way themselves; now every reader goes through here)."""
    monkeypatch.setenv("TG_TEST_EMPTY", "")
    monkeypatch.setenv("TG_TEST_SET", "3")
    empty, given = flag("TG_TEST_EMPTY", 2, "test"), flag("TG_TEST_SET", 2, "test")
    try:
        assert (empty.value, given.value) == (2, 3)
    finally:
        del FLAGS["TG_TEST_EMPTY"], FLAGS["TG_TEST_SET"]
