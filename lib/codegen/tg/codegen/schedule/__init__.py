"""The scheduler: from the tensor graph that tg.tensor builds to a linear list of kernel calls.

graph.py is the contract (the nodes tg.tensor builds); realize.py decides which nodes get buffers; kernel.py and
indexing.py build one kernel AST per buffer; schedule.py orders them and caches schedules.
"""

from tg.codegen.schedule.schedule import CopyCall, KernelCall, Schedule, create_schedule

__all__ = ["CopyCall", "KernelCall", "Schedule", "create_schedule"]
