"""Render synthetic depth images of human bodies with per-pixel part labels and joint positions.

    python -m imageforest.apps.bodyparts.renderer -n N -o DIR --seed S [--size 320x240|640x480] [--sheet PNG]

(`data_scripts/render_bodies.py` runs the same from a checkout.)

No small public data set of depth bodies with part labels and joints exists, so this renders one, in the manner of
Shotton et al., "Real-time human pose recognition in parts from single depth images", CVPR 2011: an articulated
skeleton of 20 joints (pelvis, chest, neck, head, and per side shoulder, elbow, wrist, hand tip, hip, knee, ankle,
toe; the joints JSON adds the centres of hands and feet), limbs and torso as capsules and the head as a sphere, ray-
cast with a z-buffer (nearest hit wins, so limbs occlude each other), labelled with the paper's 31 parts. Each image
draws a random pose within joint limits, a turn of the body about the vertical of up to 90 degrees either way from
facing the sensor (a Kinect user faces it; a capsule body seen from behind has no cue to tell its left from its
right), a body size from child to large adult (1.1-1.95 m), a camera 1.5-4 m away at 0.8-1.6 m height aimed at the
body with a tilt of up to 5 degrees (at 1.5 m a tall body overflows the Kinect-like 45-degree field of view, as it
would), and a depth sensor's noise (depth quantisation growing with the square of the distance, as a structured-
light sensor's disparity steps do, and missing pixels along silhouettes).

Per image, in DIR: `body_NNNNN_depth.png` (uint16, mm, 0 = background), `body_NNNNN_parts.png` (uint8, part
number 1-31 in `PARTS` order, 0 = background) and `body_NNNNN_joints.json` (per joint: 3-D camera mm, 2-D pixel,
visible). Deterministic per seed: image k uses the generator seeded with (seed, k).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from imageforest.kernels import njit

PARTS = (
    "head_upper_left", "head_upper_right", "head_lower_left", "head_lower_right", "neck",
    "shoulder_left", "shoulder_right", "upper_arm_left", "upper_arm_right", "elbow_left", "elbow_right",
    "forearm_left", "forearm_right", "wrist_left", "wrist_right", "hand_left", "hand_right",
    "torso_upper_left", "torso_upper_right", "torso_lower_left", "torso_lower_right",
    "upper_leg_left", "upper_leg_right", "knee_left", "knee_right", "lower_leg_left", "lower_leg_right",
    "ankle_left", "ankle_right", "foot_left", "foot_right",
)
PART = {name: k + 1 for k, name in enumerate(PARTS)}  # 0 is background
JOINTS = ("pelvis", "chest", "neck", "head",
          "shoulder_left", "elbow_left", "wrist_left", "hand_tip_left", "shoulder_right", "elbow_right", "wrist_right",
          "hand_tip_right", "hip_left", "knee_left", "ankle_left", "toe_left", "hip_right", "knee_right", "ankle_right",
          "toe_right")
J = {name: k for k, name in enumerate(JOINTS)}

# Primitive kinds: 0 capsule (joint a -> joint b, radius), 1 sphere (joint a, radius).
# Per capsule, how its length splits into parts: (t_end_1, part_1, t_end_2, part_2, ...) along a -> b.
# Torso halves and head quadrants are split by side and height in `_label`.
TORSO_L, TORSO_R, HEAD = 100, 101, 102  # markers resolved per hit


def _rot(axis: str, angle: float) -> np.ndarray:
    c, s = np.cos(angle), np.sin(angle)
    if axis == "x":
        return np.array([[1, 0, 0], [0, c, -s], [0, s, c]])
    if axis == "y":
        return np.array([[c, 0, s], [0, 1, 0], [-s, 0, c]])
    return np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]])


def pose_joints(rng: np.random.Generator) -> tuple[np.ndarray, float]:
    """Joint positions (20, 3) in metres in the body frame (x to the body's left, y up, z forward; feet near
    y = 0) for a random body height and pose within joint limits; and the height."""
    H = rng.uniform(1.1, 1.95)
    d = np.deg2rad
    p = np.zeros((len(JOINTS), 3))
    p[J["pelvis"]] = [0, 0.53 * H, 0]
    bend = _rot("x", d(rng.uniform(-10, 35))) @ _rot("y", d(rng.uniform(-30, 30)))  # spine flexion, twist
    up = np.array([0.0, 1.0, 0.0])
    p[J["chest"]] = p[J["pelvis"]] + bend @ (0.20 * H * up)
    p[J["neck"]] = p[J["chest"]] + bend @ (0.10 * H * up)
    head = bend @ _rot("x", d(rng.uniform(-20, 30))) @ _rot("y", d(rng.uniform(-50, 50)))
    p[J["head"]] = p[J["neck"]] + head @ (0.09 * H * up)
    for side, sx in (("left", 1.0), ("right", -1.0)):
        shoulder = p[J["chest"]] + bend @ np.array([sx * 0.12 * H, 0.06 * H, 0.0])
        # arm hanging down, raised forward (flexion) and sideways (abduction), elbow bent forward
        arm = bend @ _rot("x", -d(rng.uniform(-40, 170))) @ _rot("z", sx * d(rng.uniform(0, 150)))
        elbow = shoulder + arm @ np.array([0, -0.17 * H, 0])
        fore = arm @ _rot("x", -d(rng.uniform(0, 145)))
        wrist = elbow + fore @ np.array([0, -0.15 * H, 0])
        hand = wrist + fore @ np.array([0, -0.09 * H, 0])
        hip = p[J["pelvis"]] + np.array([sx * 0.055 * H, -0.03 * H, 0])
        leg = _rot("x", -d(rng.uniform(-20, 100))) @ _rot("z", sx * d(rng.uniform(0, 40)))
        knee = hip + leg @ np.array([0, -0.24 * H, 0])
        shin = leg @ _rot("x", d(rng.uniform(0, 130)))
        ankle = knee + shin @ np.array([0, -0.23 * H, 0])
        toe = ankle + shin @ np.array([0, -0.03 * H, 0.11 * H])
        for name, v in (("shoulder", shoulder), ("elbow", elbow), ("wrist", wrist), ("hand_tip", hand),
                        ("hip", hip), ("knee", knee), ("ankle", ankle), ("toe", toe)):
            p[J[f"{name}_{side}"]] = v
    p[:, 1] -= p[:, 1].min()  # the lowest point on the floor
    return p, H


def primitives(p: np.ndarray, H: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Capsules and spheres of a posed body: ends (n, 2, 3) m, radii (n,) m, part codes (n, 6) as
    (t1, part1, t2, part2, t3, part3) splits along the capsule (parts >= 100 resolved per hit)."""
    rows = []

    def cap(a, b, r, *splits):
        code = list(splits) + [1.0, splits[-1]] * ((6 - len(splits)) // 2)
        rows.append((p[J[a]], p[J[b]], r * H, code[:6]))

    for side in ("left", "right"):
        cap(f"shoulder_{side}", f"elbow_{side}", 0.030, 0.2, PART[f"shoulder_{side}"], 0.85, PART[f"upper_arm_{side}"],
            1.0, PART[f"elbow_{side}"])
        cap(f"elbow_{side}", f"wrist_{side}", 0.025, 0.1, PART[f"elbow_{side}"], 0.85, PART[f"forearm_{side}"],
            1.0, PART[f"wrist_{side}"])
        cap(f"wrist_{side}", f"hand_tip_{side}", 0.022, 1.0, PART[f"hand_{side}"])
        cap(f"hip_{side}", f"knee_{side}", 0.045, 0.15, PART[f"upper_leg_{side}"], 0.85, PART[f"upper_leg_{side}"],
            1.0, PART[f"knee_{side}"])
        cap(f"knee_{side}", f"ankle_{side}", 0.035, 0.1, PART[f"knee_{side}"], 0.88, PART[f"lower_leg_{side}"],
            1.0, PART[f"ankle_{side}"])
        cap(f"ankle_{side}", f"toe_{side}", 0.025, 1.0, PART[f"foot_{side}"])
    cap("chest", "head", 0.028, 1.0, PART["neck"])
    ends = np.array([[r[0], r[1]] for r in rows])
    radii = np.array([r[2] for r in rows])
    codes = np.array([r[3] for r in rows], dtype=np.float64)
    # torso: two capsules side by side from the pelvis to the chest, and the head as a sphere
    side = p[J["shoulder_left"]] - p[J["shoulder_right"]]
    side /= np.linalg.norm(side)
    torso_ends, torso_codes = [], []
    for sx, marker in ((1.0, TORSO_L), (-1.0, TORSO_R)):
        off = sx * 0.055 * H * side
        torso_ends.append([p[J["pelvis"]] + off + np.array([0, 0.02 * H, 0]), p[J["chest"]] + off])
        torso_codes.append([1.0, marker, 1.0, marker, 1.0, marker])
    ends = np.concatenate([ends, np.array(torso_ends), np.array([[p[J["head"]], p[J["head"]]]])])
    radii = np.concatenate([radii, [0.085 * H, 0.085 * H, 0.062 * H]])
    codes = np.concatenate([codes, np.array(torso_codes), [[1.0, HEAD, 1.0, HEAD, 1.0, HEAD]]])
    return ends, radii, codes


@njit(cache=True)
def _hit(ox, oy, oz, dx, dy, dz, ax, ay, az, bx, by, bz, r):  # pragma: no cover - numba
    """Nearest ray parameter s > 0 where the ray o + s d meets the capsule a-b of radius r, and t along a-b
    (inf when it misses). Scalars only: the kernel runs per pixel and primitive."""
    best, best_t = np.inf, 0.0
    dd = dx * dx + dy * dy + dz * dz
    for e in range(2):  # sphere caps (the whole primitive when a == b)
        cx, cy, cz = (ax, ay, az) if e == 0 else (bx, by, bz)
        px, py, pz = ox - cx, oy - cy, oz - cz
        bq = px * dx + py * dy + pz * dz
        disc = bq * bq - dd * (px * px + py * py + pz * pz - r * r)
        if disc >= 0.0:
            s = (-bq - np.sqrt(disc)) / dd
            if 0.0 < s < best:
                best, best_t = s, float(e)
    ux, uy, uz = bx - ax, by - ay, bz - az
    L2 = ux * ux + uy * uy + uz * uz
    if L2 > 1e-12:  # the cylinder between the caps: |(o + s d - a) x u|^2 = r^2 |u|^2, 0 <= t <= 1
        px, py, pz = ox - ax, oy - ay, oz - az
        du = dx * ux + dy * uy + dz * uz
        pu = px * ux + py * uy + pz * uz
        qa = L2 * dd - du * du
        if qa > 1e-12:
            qb = L2 * (px * dx + py * dy + pz * dz) - pu * du
            qc = L2 * (px * px + py * py + pz * pz) - pu * pu - r * r * L2
            disc = qb * qb - qa * qc
            if disc >= 0.0:
                s = (-qb - np.sqrt(disc)) / qa
                t = (pu + s * du) / L2
                if 0.0 < s < best and 0.0 <= t <= 1.0:
                    best, best_t = s, t
    return best, best_t


@njit(cache=True)
def _cast(ends, radii, codes, origin, rot, fx, fy, cx, cy, width, height, mid_y, left_axis, head_c, depth,
          parts):  # pragma: no cover - numba
    """Ray-cast every pixel against the capsules (z-buffer: the nearest hit wins): depth along the optical axis
    (m) and part number."""
    ox, oy, oz = origin[0], origin[1], origin[2]
    n = ends.shape[0]
    for v in range(height):
        for u in range(width):
            px = (u - cx) / fx
            py = (v - cy) / fy
            dx = rot[0, 0] * px + rot[0, 1] * py + rot[0, 2]
            dy = rot[1, 0] * px + rot[1, 1] * py + rot[1, 2]
            dz = rot[2, 0] * px + rot[2, 1] * py + rot[2, 2]
            best, best_k, best_t = np.inf, -1, 0.0
            for k in range(n):
                s, t = _hit(ox, oy, oz, dx, dy, dz, ends[k, 0, 0], ends[k, 0, 1], ends[k, 0, 2], ends[k, 1, 0],
                            ends[k, 1, 1], ends[k, 1, 2], radii[k])
                if s < best:
                    best, best_k, best_t = s, k, t
            if best_k < 0:
                continue
            depth[v, u] = best  # the ray's optical-axis component is 1, so s is the depth
            part = codes[best_k, 5]
            for j in range(3):
                if best_t <= codes[best_k, 2 * j]:
                    part = codes[best_k, 2 * j + 1]
                    break
            if part >= 100.0:  # torso halves and head quadrants: by height and side
                hx, hy, hz = ox + best * dx, oy + best * dy, oz + best * dz
                if part == 102.0:
                    rx, ry, rz = hx - head_c[0], hy - head_c[1], hz - head_c[2]
                    left = rx * left_axis[0] + ry * left_axis[1] + rz * left_axis[2] >= 0.0
                    part = (1.0 if left else 2.0) if ry >= 0.0 else (3.0 if left else 4.0)
                else:
                    left = part == 100.0
                    part = (18.0 if left else 19.0) if hy >= mid_y else (20.0 if left else 21.0)
            parts[v, u] = np.uint8(part)


def render(rng: np.random.Generator, width: int = 320, height: int = 240) -> tuple[np.ndarray, np.ndarray, dict]:
    """One body: depth (height, width) uint16 mm, parts (height, width) uint8, joints document."""
    p, H = pose_joints(rng)
    yaw = rng.uniform(-0.5 * np.pi, 0.5 * np.pi)  # a user faces the sensor, turned up to side-on
    body = _rot("y", yaw)
    world = p @ body.T  # the body turned about the vertical
    ends, radii, codes = primitives(world, H)
    distance = rng.uniform(1.5, 4.0)
    cam_h = rng.uniform(0.8, 1.6)
    tilt = np.deg2rad(rng.uniform(-5, 5))
    target = np.array([0.0, 0.5 * H, 0.0])
    origin = np.array([rng.uniform(-0.3, 0.3), cam_h, distance])  # looking along -z at the body
    # camera axes in world coordinates: x right, y down, z forward (towards the body), tilted by `tilt`
    fwd = target - origin
    fwd[1] += np.tan(tilt) * np.hypot(fwd[0], fwd[2])  # aimed at the body's middle, then tilted a little
    fwd /= np.linalg.norm(fwd)
    right = np.cross(fwd, [0.0, 1.0, 0.0])
    right /= np.linalg.norm(right)
    down = np.cross(fwd, right)
    rot = np.stack([right, down, fwd], axis=1)  # columns: camera axes in world coordinates
    f = 285.0 * width / 320.0  # a Kinect-like focal length in pixels
    depth = np.zeros((height, width))
    parts = np.zeros((height, width), dtype=np.uint8)
    left_axis = body @ np.array([1.0, 0.0, 0.0])
    mid_y = 0.5 * (world[J["pelvis"], 1] + world[J["chest"], 1])
    _cast(ends, radii, codes, origin, rot, f, f, width / 2.0, height / 2.0, width, height, mid_y, left_axis,
          world[J["head"]], depth, parts)
    mm = depth * 1000.0
    # sensor noise: depth steps growing with distance squared (2.85e-6 z^2 mm), pixels missing along silhouettes
    step = 2.85e-6 * mm ** 2
    mm = np.where(mm > 0, np.round(mm / np.maximum(step, 1.0)) * np.maximum(step, 1.0), 0.0)
    fg = mm > 0
    edge = fg & ~(np.roll(fg, 1, 0) & np.roll(fg, -1, 0) & np.roll(fg, 1, 1) & np.roll(fg, -1, 1))
    drop = edge & (rng.random(fg.shape) < 0.5)
    mm[drop] = 0.0
    parts[drop] = 0
    cam = (world - origin) @ rot  # joints in camera coordinates (m)
    # and the centres of hands and feet, the joints Shotton et al. propose for those parts
    centres = [f"{part}_{side}" for part in ("hand", "foot") for side in ("left", "right")]
    cam = np.concatenate([cam, [0.5 * (cam[J[f"wrist_{s}"]] + cam[J[f"hand_tip_{s}"]]) for s in ("left", "right")],
                          [0.5 * (cam[J[f"ankle_{s}"]] + cam[J[f"toe_{s}"]]) for s in ("left", "right")]])
    joints = {}
    for name, (x, y, z) in zip(JOINTS + tuple(centres), cam, strict=True):
        u, v = f * x / z + width / 2.0, f * y / z + height / 2.0
        inside = 0 <= u < width and 0 <= v < height
        seen = bool(inside and mm[int(v), int(u)] > 0 and mm[int(v), int(u)] > z * 1000.0 - 0.12 * H * 1000.0)
        joints[name] = {"camera_mm": [round(1000.0 * x, 1), round(1000.0 * y, 1), round(1000.0 * z, 1)],
                        "pixel": [round(u, 2), round(v, 2)], "visible": seen}
    doc = {"height_m": round(H, 3), "camera": {"fx": f, "fy": f, "cx": width / 2.0, "cy": height / 2.0,
                                               "distance_m": round(distance, 3), "height_m": round(cam_h, 3)},
           "joints": joints, "parts": list(PARTS)}
    return mm.astype(np.uint16), parts, doc


def _write_png(path: Path, array: np.ndarray) -> None:
    from PIL import Image as PILImage

    tmp = path.with_name(f".{path.name}.tmp")
    PILImage.fromarray(array).save(tmp, format="PNG")
    os.replace(tmp, path)


def contact_sheet(images: list[tuple[np.ndarray, np.ndarray]], path: Path) -> None:
    """Depth (grey) above parts (coloured) for up to 8 renders, one PNG."""
    from PIL import Image as PILImage

    rng = np.random.default_rng(0)
    palette = rng.integers(40, 255, (32, 3)).astype(np.uint8)
    palette[0] = 0
    cols = []
    for depth, parts in images[:8]:
        d = depth.astype(np.float64)
        shown = np.where(d > 0, 255 - 200 * (d - d[d > 0].min()) / max(np.ptp(d[d > 0]), 1), 0).astype(np.uint8)
        cols.append(np.concatenate([np.repeat(shown[..., None], 3, axis=2), palette[parts]], axis=0))
    PILImage.fromarray(np.concatenate(cols, axis=1)).save(path)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, required=True, help="images to render")
    ap.add_argument("-o", "--out", type=Path, required=True, help="output folder (created)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--size", default="320x240", choices=("320x240", "640x480"))
    ap.add_argument("--sheet", type=Path, default=None, help="also write a contact sheet PNG of the first 8")
    args = ap.parse_args(argv)
    if args.n < 1:
        sys.exit("renderer: -n must be at least 1")
    width, height = (int(v) for v in args.size.split("x"))
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    shown = []
    for k in range(args.n):
        rng = np.random.default_rng([args.seed, k])
        depth, parts, doc = render(rng, width, height)
        stem = args.out / f"body_{k:05d}"
        _write_png(stem.with_name(stem.name + "_depth.png"), depth)
        _write_png(stem.with_name(stem.name + "_parts.png"), parts)
        stem.with_name(stem.name + "_joints.json").write_text(json.dumps(doc))
        if len(shown) < 8:
            shown.append((depth, parts))
    seconds = time.perf_counter() - t0
    if args.sheet is not None:
        contact_sheet(shown, args.sheet)
    print(f"{args.n} bodies in {seconds:.1f} s ({args.n / seconds:.1f} per second) -> {args.out}")


if __name__ == "__main__":
    main()
