"""Numpy helpers shared by the analyses."""

from __future__ import annotations

import numpy as np

from ..model import Cell
from ..store import OP_CODE, RESOURCE_CODE, SPACE_CODE, EventTable

CREATE, JOIN = OP_CODE["create"], OP_CODE["join"]
RELEASE, FREE, ERROR = OP_CODE["release"], OP_CODE["free"], OP_CODE["error"]
BUFFER = RESOURCE_CODE["buffer"]
REGS = SPACE_CODE["REGS"]


def kernel_level_blocks(table: EventTable) -> np.ndarray:
    """Block-table indices that stand for "no grid block" (kernel operands)."""
    return np.array([i for i, b in enumerate(table.blocks) if b == ()], dtype=np.int32)


def in_block_mask(table: EventTable) -> np.ndarray:
    """Events that belong to a grid block (not kernel-level GMEM operands)."""
    # a lookup table per block index (one more entry, True, for a -1 "no block")
    inside = np.ones(len(table.blocks) + 1, dtype=bool)
    inside[kernel_level_blocks(table)] = False
    return inside[table.columns["block"]]


def request_mask(table: EventTable) -> np.ndarray:
    op = table.columns["op"]
    return (op == CREATE) | (op == JOIN)


def cell(table: EventTable, i: int) -> Cell:
    c = table.columns
    return (int(c["device"][i]), table.blocks[c["block"][i]], int(c["thread"][i]))


def group_starts(keys: np.ndarray) -> np.ndarray:
    """Start offsets of runs of equal values in a sorted 1-D array."""
    if len(keys) == 0:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
