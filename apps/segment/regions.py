"""Each class keeps the regions its strokes reach: a class's connected region that holds none of its strokes goes to
the background.

After the cut, the likeliest errors from sparse strokes are blobs of an object's class far from any of its strokes,
where the picture looks like the object (a patch of background of the horse's colour); a region an object's
strokes touch is where the person said the object is. The background (the largest scribble number, or the init's)
is exempt: its unmarked regions are as often true holes in an object as errors. Regions are connected through
faces, edges and corners (8 neighbours in a picture, 26 in a volume), so a thin diagonal part stays attached.
"""

from __future__ import annotations

import numpy as np

from imageforest.kernels import njit


def keep_stroked_regions(idx: np.ndarray, grid: tuple[int, int, int], strokes: np.ndarray, background: int,
                         exempt: np.ndarray | None = None) -> np.ndarray:
    """Class indices with every region of a non-exempt class that holds none of its strokes moved to `background`.

    Parameters
    ----------
    idx : (n,) class index per pixel, n = prod(grid), C order over (z, y, x) (pictures: z = 1)
    grid : (z, y, x)
    strokes : (n,) int64, the class index of each stroked pixel, -1 elsewhere
    background : the class index unmarked regions go to (itself exempt)
    exempt : (C,) bool, further classes whose regions all stay (locked classes); None: none

    Returns
    -------
    (n,) int64, a new array
    """
    out = np.ascontiguousarray(idx, dtype=np.int64).ravel().copy()
    n_cls = int(max(out.max(initial=0), strokes.max(initial=-1), background,
                    -1 if exempt is None else len(exempt) - 1)) + 1
    keep = np.zeros(n_cls, dtype=np.bool_)
    if exempt is not None:
        keep[: len(exempt)] = exempt
    keep[background] = True
    _keep_stroked(out, np.asarray(grid, dtype=np.int64), np.ascontiguousarray(strokes, dtype=np.int64), keep,
                  int(background))
    return out


@njit(cache=True)
def _keep_stroked(lab, grid, strokes, keep, background):  # pragma: no cover - numba
    """In place: a breadth-first flood from every stroked pixel through pixels of its own class, then the pixels
    of non-kept classes it did not reach go to `background`."""
    nz, ny, nx = grid[0], grid[1], grid[2]
    n = lab.size
    reached = np.zeros(n, dtype=np.bool_)
    queue = np.empty(n, dtype=np.int64)
    tail = 0
    for i in range(n):
        if strokes[i] >= 0 and strokes[i] == lab[i] and not keep[lab[i]]:
            reached[i] = True
            queue[tail] = i
            tail += 1
    head = 0
    plane = ny * nx
    while head < tail:
        i = queue[head]
        head += 1
        z = i // plane
        y = (i - z * plane) // nx
        x = i - z * plane - y * nx
        k = lab[i]
        for dz in range(-1, 2):
            zz = z + dz
            if zz < 0 or zz >= nz:
                continue
            for dy in range(-1, 2):
                yy = y + dy
                if yy < 0 or yy >= ny:
                    continue
                for dx in range(-1, 2):
                    xx = x + dx
                    if xx < 0 or xx >= nx:
                        continue
                    j = zz * plane + yy * nx + xx
                    if not reached[j] and lab[j] == k:
                        reached[j] = True
                        queue[tail] = j
                        tail += 1
    for i in range(n):
        if not reached[i] and not keep[lab[i]]:
            lab[i] = background
