"""Numpy helpers shared by the analyses."""

from __future__ import annotations

import numpy as np

from ..model import Cell
from ..store import OP_CODE, RESOURCE_CODE, SPACE_CODE, EventTable

CREATE, JOIN = OP_CODE["create"], OP_CODE["join"]
RELEASE, FREE, ERROR = OP_CODE["release"], OP_CODE["free"], OP_CODE["error"]
BUFFER = RESOURCE_CODE["buffer"]
REGS = SPACE_CODE["REGS"]


def in_block_mask(table: EventTable) -> np.ndarray:
    """Events a block made (not the kernel-level requests the interpreter makes for a
    whole device: operands, pallas_call scratch). A kernel without a grid has one
    block, `()`, and its events are in it like any other block's."""
    return table.columns["block"] >= 0


def placed_mask(table: EventTable) -> np.ndarray:
    """Events the analyses can pin to a (device, block, thread)."""
    c = table.columns
    return (c["block"] >= 0) & (c["thread"] >= 0) & (c["device"] >= 0)


def request_mask(table: EventTable) -> np.ndarray:
    op = table.columns["op"]
    return (op == CREATE) | (op == JOIN)


def cell(table: EventTable, i: int) -> Cell:
    c = table.columns
    return (int(c["device"][i]), table.block(int(c["block"][i])), int(c["thread"][i]))


def group_starts(*keys: np.ndarray) -> np.ndarray:
    """Start offsets of the runs of equal key tuples in equally long, sorted 1-D arrays."""
    n = len(keys[0])
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    new = np.zeros(n, dtype=bool)
    new[0] = True
    for k in keys:
        new[1:] |= k[1:] != k[:-1]
    return np.flatnonzero(new)
