"""Renderers: a linear program (see tg.codegen.lower) in, source text for one device out."""

from tg.codegen.render.base import KernelText, LinearRenderer, RenderedKernel, Renderer

__all__ = ["KernelText", "LinearRenderer", "RenderedKernel", "Renderer"]
