"""A synthetic head-and-neck CT phantom with the seven organs of the default model, generated deterministically.

Used by `make demo` (the repository ships no patient data) and by tests. Shapes are simple solids (ellipsoids,
tubes, a U-shaped mandible) placed with typical adult anatomy: the organs' positions relative to the brainstem
follow the population medians of head-and-neck planning CTs (e.g. parotids about 55 mm lateral and 27 mm anterior
of the brainstem; larynx 70-100 mm below it). Intensities are typical Hounsfield units; outside the body is -1024,
as in the openkbp-hn data. A seed varies size, position and organ shapes.

    ct, labels = head_neck_phantom(seed=0)     # Image int16 HU, Image uint8 labels 1..7 (ORGANS order)
"""

from __future__ import annotations

import numpy as np
from scipy import ndimage

from imageforest.imaging.io import Image

ORGANS = ("Brainstem", "SpinalCord", "RightParotid", "LeftParotid", "Esophagus", "Larynx", "Mandible")
HU = {"air": -1000.0, "fat": -100.0, "muscle": 45.0, "brain": 35.0, "csf": 10.0, "bone": 900.0,
      "cortical": 1300.0, "marrow": 350.0, "cartilage": 250.0, "parotid": -5.0, "cord": 28.0, "skin": 20.0}


def head_neck_phantom(seed: int = 0, size=(128, 128, 112), spacing=(3.9, 3.9, 2.5), noise_hu: float = 12.0
                      ) -> tuple[Image, Image]:
    """A CT volume (int16 HU) and its organ label map (uint8, labels 1..7 in `ORGANS` order), LPS, origin 0.

    Parameters
    ----------
    seed : int
        Fixes the anatomy's variation and the noise.
    size : (nx, ny, nz) voxels
    spacing : (x, y, z) mm
    """
    rng = np.random.default_rng(seed)
    sx, sy, sz = (float(s) for s in spacing)
    nx, ny, nz = (int(n) for n in size)
    scale = rng.uniform(0.93, 1.07)
    # Reference: the bottom centre of the brainstem, placed like the scans of the openkbp-hn data.
    ref = np.array([nx * sx / 2, ny * sy / 2 - 15.0, nz * sz * 0.68]) + rng.uniform(-12, 12, 3)
    z, y, x = np.meshgrid(np.arange(nz) * sz, np.arange(ny) * sy, np.arange(nx) * sx, indexing="ij")
    X = (x - ref[0]) / scale
    Y = (y - ref[1]) / scale
    Z = (z - ref[2]) / scale

    def jitter(mm: float = 3.0) -> np.ndarray:
        return rng.uniform(-mm, mm, 3)

    def ellipsoid(c, r) -> np.ndarray:
        return ((X - c[0]) / r[0]) ** 2 + ((Y - c[1]) / r[1]) ** 2 + ((Z - c[2]) / r[2]) ** 2 <= 1.0

    ct = np.full(X.shape, HU["air"] - 24.0, dtype=np.float32)  # -1024 outside the body
    labels = np.zeros(X.shape, dtype=np.uint8)

    # Spine curve: the cord runs down and backwards from the brainstem.
    def cord_y(zz):
        return 2.0 + 0.28 * np.clip(-zz, 0, None)

    # Body: neck and shoulders (elliptic cylinders), face and head (ellipsoids).
    neck_half = np.array([62.0, 68.0]) * rng.uniform(0.95, 1.05, 2)
    shoulder = np.clip((-150.0 - Z) / 40.0, 0.0, 1.0)
    neck = (((X / (neck_half[0] + 110 * shoulder)) ** 2 + ((Y - 12 - 0.1 * np.clip(-Z, 0, None))
                                                            / (neck_half[1] + 25 * shoulder)) ** 2 <= 1.0)
            & (Z < 10))
    head = ellipsoid([0, -15, 45], [76, 98, 100])
    face = ellipsoid([0, -55, -20], [62, 68, 60])
    body = neck | head | face
    ct[body] = HU["muscle"]
    # Subcutaneous fat: an 8 mm shell under the skin.
    inner = ndimage.binary_erosion(body, iterations=2)
    ct[body & ~inner] = HU["fat"]
    ct[body & ~ndimage.binary_erosion(body, iterations=1)] = HU["skin"]

    # Skull and brain.
    skull_out = ellipsoid([0, -15, 52], [70, 92, 92]) & (Z > -8)
    brain = ellipsoid([0, -15, 52], [63, 85, 85]) & (Z > -2)
    ct[skull_out] = HU["bone"]
    ct[brain] = HU["brain"]
    # Skull base: a bony plate under the brain, with the foramen magnum open for the brainstem.
    base = (np.abs(Z + 4) < 4) & ellipsoid([0, -15, 0], [60, 80, 30]) & ~((X ** 2 + Y ** 2) < 16 ** 2)
    ct[base] = HU["bone"]

    # Brainstem (1): ellipsoid rising from the foramen magnum.
    bs_c = np.array([0.0, 0.0, 28.0]) + jitter(2.0)
    bs = ellipsoid(bs_c, np.array([16.0, 14.5, 29.0]) * rng.uniform(0.9, 1.1, 3))
    ct[bs] = HU["cord"] - 2.0
    labels[bs] = 1

    # Vertebral column, spinal canal and cord (2).
    cy = cord_y(Z)
    below = Z < 2
    r2 = X ** 2 + (Y - cy) ** 2
    body_vert = below & ((X ** 2 + (Y - (cy - 22)) ** 2) < 12.5 ** 2)
    discs = (np.mod(-Z, 18.0) < 4.0)
    ct[body_vert] = np.where(discs[body_vert], 80.0, HU["marrow"])
    arch = below & (r2 < 15.0 ** 2) & (r2 >= 9.0 ** 2)
    ct[arch] = HU["bone"]
    canal = below & (r2 < 9.0 ** 2)
    ct[canal] = HU["csf"]
    cord_r = 5.5 * rng.uniform(0.9, 1.1)
    cord_bottom = -float(rng.uniform(150.0, 240.0))
    cord = below & (r2 < cord_r ** 2) & (Z > cord_bottom)
    ct[cord] = HU["cord"]
    labels[cord & (labels == 0)] = 2

    # Mandible (7): a U-shaped bony arch opening backwards, plus two rami rising to the skull base.
    m_off = jitter(3.0)
    a, b = 57.0, 98.0
    mx, my = X - m_off[0], Y - (-18.0 + m_off[1])
    u = (mx / a) ** 2 + (my / b) ** 2
    arch_band = (u <= 1.0) & (u >= (1 - 10.0 / a) ** 2) & (my < 0)
    mand_body = arch_band & (Z > -48 + m_off[2]) & (Z < -28 + m_off[2])
    rami = ((np.abs(np.abs(mx) - 52.0) < 5.0) & (my > -30) & (my < 0) & (Z >= -48 + m_off[2])
            & (Z < 26 + m_off[2]))
    mand = mand_body | rami
    ct[mand] = HU["cortical"]
    labels[mand & (labels == 0)] = 7
    # Teeth just above the mandible body: dense, unlabelled.
    teeth = (u <= 1.0) & (u >= (1 - 9.0 / a) ** 2) & (my < -8) & (Z >= -28 + m_off[2]) & (Z < -18 + m_off[2])
    ct[teeth] = 1800.0

    # Parotids (3 right: patient right is low x in LPS; 4 left).
    for label, side in ((3, -1.0), (4, 1.0)):
        c = np.array([side * 56.0, -27.0, -7.0]) + jitter(3.0)
        p = ellipsoid(c, np.array([17.0, 21.0, 25.0]) * rng.uniform(0.85, 1.15, 3)) & ~mand
        ct[p] = HU["parotid"]
        labels[p & (labels == 0)] = label

    # Airway: pharynx behind the tongue, larynx (6) with cartilage wall and air, trachea below.
    airway_y = -12.0 + 0.0 * Z
    pharynx = (Z > -72) & (Z < -20) & (((X / 9.0) ** 2 + ((Y - airway_y) / 6.0) ** 2) < 1.0)
    ct[pharynx] = HU["air"]
    lx = np.array([1.0, -40.0, -84.0]) + jitter(3.0)
    lar_r = np.array([17.0, 19.0]) * rng.uniform(0.9, 1.1, 2)
    lar_h = 16.0 * rng.uniform(0.85, 1.15)
    lar_rad = ((X - lx[0]) / lar_r[0]) ** 2 + ((Y - lx[1]) / lar_r[1]) ** 2
    larynx = (lar_rad <= 1.0) & (np.abs(Z - lx[2]) <= lar_h)
    ct[larynx] = HU["muscle"] + 15.0
    ct[larynx & (lar_rad >= 0.72)] = HU["cartilage"]
    ct[larynx & (lar_rad <= 0.2)] = HU["air"]
    labels[larynx & (labels == 0)] = 6
    trachea = (Z < lx[2] - lar_h) & (((X - lx[0]) ** 2 + (Y - lx[1] - 3.0) ** 2) < 8.0 ** 2)
    ct[trachea] = HU["air"]
    ring = (Z < lx[2] - lar_h) & (np.abs(np.sqrt((X - lx[0]) ** 2 + (Y - lx[1] - 3.0) ** 2) - 9.5) < 1.5)
    ct[ring] = HU["cartilage"] - 100.0

    # Esophagus (5): a muscular tube between the trachea and the vertebral bodies, below the larynx top.
    e_top = lx[2] - 22.0 + rng.uniform(-10, 10)
    e_bottom = e_top - rng.uniform(55.0, 95.0)
    ey = cord_y(Z) - 38.0
    eso_r2 = ((X - 4.0) / 9.0) ** 2 + ((Y - ey) / 6.5) ** 2
    eso = (eso_r2 <= 1.0) & (Z <= e_top) & (Z >= e_bottom)
    ct[eso] = HU["muscle"]
    ct[eso & (eso_r2 < 0.12)] = HU["air"]
    labels[eso & (labels == 0)] = 5

    ct = ndimage.gaussian_filter(ct, 0.6) + rng.normal(0.0, noise_hu, ct.shape).astype(np.float32)
    ct[~body] = -1024.0
    ct = np.clip(np.round(ct), -1024, 3071).astype(np.int16)
    labels[~body] = 0
    geometry = dict(spacing=np.array([sx, sy, sz]), origin=np.zeros(3), direction=np.eye(3))
    return (Image(ct, source=f"phantom(seed={seed})", **geometry),
            Image(labels, source=f"phantom(seed={seed}) labels", **geometry))
