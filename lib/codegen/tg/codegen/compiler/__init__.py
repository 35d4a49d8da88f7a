"""Compilers: source text in, binary bytes out, cached on disk by (source, compiler, flags)."""

from tg.codegen.compiler.base import CompileError, Compiler
from tg.codegen.compiler.c import CCompiler, find_c_compiler

__all__ = ["CCompiler", "CompileError", "Compiler", "find_c_compiler"]
