"""The compiler interface every backend implements, and the error a failed compile raises."""

from __future__ import annotations

from tg.codegen.compiler.cache import cache_key, load_compiled, store_compiled


class CompileError(RuntimeError):
    """A compile failed; the message carries the compiler's output and the numbered source."""

    def __init__(self, compiler_output: str, source: str, command: str = "") -> None:
        self.compiler_output = compiler_output
        self.source = source
        self.command = command
        numbered = "\n".join(f"{i:4d} | {line}" for i, line in enumerate(source.splitlines(), start=1))
        header = f"compile failed: {command}" if command else "compile failed"
        super().__init__(f"{header}\n{compiler_output.rstrip()}\n--- source ---\n{numbered}")


class Compiler:
    """Turns source text into a binary. Subclasses implement `compile_uncached` and `identity`.

    `compile` looks the binary up in the on-disk cache first, keyed by the source and by `identity()`
    (which names the compiler binary, its version and every flag), so a change of any of them recompiles.
    """

    def identity(self) -> str:
        raise NotImplementedError

    def compile_uncached(self, source: str) -> bytes:
        raise NotImplementedError

    def assembly(self, source: str) -> str | None:
        """The machine code of `source` as readable text (what DEBUG=4 prints after the source), or None where the
        compiler gives none."""
        return None

    def compile(self, source: str) -> bytes:
        key = cache_key(source, self.identity())
        cached = load_compiled(key)
        if cached is not None:
            return cached
        binary = self.compile_uncached(source)
        store_compiled(key, binary)
        return binary
