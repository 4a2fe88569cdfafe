"""Contours as DICOM for a scan read from a DICOM series: a Segmentation object (DICOM-SEG, written by highdicom) or
an RT Structure Set (closed planar contours per slice, as treatment-planning systems import them). Both reference
the series' study, series, frame of reference and the SOP instances of the slices they lie on.

    write_dicom_seg(labels, "scan_dicom/", names, "organs_seg.dcm")
    write_rtstruct(labels, "scan_dicom/", names, "organs_rtstruct.dcm")

`labels` is the label map on the scan's grid (label k = names[k - 1]); it is carried onto the series' own slices
(nearest neighbour), whatever orientation the reader gave the volume. highdicom and pydicom are the optional extra
``imageforest[dicom]``.
"""

from __future__ import annotations

import datetime
import os
from pathlib import Path

import numpy as np
import SimpleITK as sitk

from imageforest.exceptions import InvalidInputError
from imageforest.imaging.io import Image

FORMATS = ("nifti", "dicom-seg", "rtstruct")
RTSTRUCT_SOP_CLASS = "1.2.840.10008.5.1.4.1.1.481.3"
STUDY_SOP_CLASS = "1.2.840.10008.3.1.2.3.1"  # Detached Study Management, as RT Structure Sets name their study
# SNOMED CT concepts of the organs the shipped models know (segmented property types); any other is an "Organ"
SNOMED = {"Brainstem": ("119238007", "Brain Stem"), "SpinalCord": ("2748008", "Spinal cord"),
          "RightParotid": ("45289007", "Parotid gland"), "LeftParotid": ("45289007", "Parotid gland"),
          "Esophagus": ("32849002", "Esophagus"), "Larynx": ("4596009", "Larynx"),
          "Mandible": ("91609006", "Mandible")}
ORGAN = ("91772007", "Organ")
# Patient and study attributes a derived object must carry, empty when unknown (DICOM type 2)
TYPE_2 = ("PatientName", "PatientID", "PatientBirthDate", "PatientSex", "StudyDate", "StudyTime", "StudyID",
          "AccessionNumber", "ReferringPhysicianName")
# Display colours (RGB) by label, the overlay's palette order
COLOURS = [(230, 25, 75), (60, 180, 75), (255, 225, 25), (0, 130, 200), (245, 130, 48), (145, 30, 180),
           (70, 240, 240), (240, 50, 230), (210, 245, 60), (250, 190, 212)]


def _pydicom():
    try:
        import pydicom
    except ImportError:
        raise InvalidInputError("--format dicom-seg and rtstruct need pydicom and highdicom: "
                                "pip install 'imageforest[dicom]'") from None
    return pydicom


def series_files(folder: str | os.PathLike) -> list[str]:
    """The slices of the series the readers read from `folder` (the largest), in the order along its normal."""
    reader = sitk.ImageSeriesReader()
    series = reader.GetGDCMSeriesIDs(str(folder))
    if not series:
        raise InvalidInputError(f"{folder}: holds no DICOM series; DICOM outputs need the scan as a series folder")
    files = {sid: reader.GetGDCMSeriesFileNames(str(folder), sid) for sid in series}
    return list(files[max(series, key=lambda sid: len(files[sid]))])


def read_series(folder: str | os.PathLike, pixels: bool = False) -> tuple[list, list[str]]:
    """The series' slices as pydicom datasets (without their pixels unless asked), in `series_files` order, and
    notes on what had to be filled in.

    Anonymised series often blank the SOP class and instance UIDs in the data set, which the file meta
    information still holds (the same values by definition): they are taken from there. A series without a
    SeriesInstanceUID, StudyInstanceUID or FrameOfReferenceUID gets one derived from its first slice's instance
    UID, the same on every run (so that the outputs of one series always agree), and a note says so: such
    references match the series only as it is on disk, not an archive's copy."""
    pydicom = _pydicom()
    from pydicom.uid import generate_uid

    datasets = [pydicom.dcmread(f, stop_before_pixels=not pixels) for f in series_files(folder)]
    for ds in datasets:
        meta = getattr(ds, "file_meta", None)
        for keyword, meta_keyword in (("SOPClassUID", "MediaStorageSOPClassUID"),
                                      ("SOPInstanceUID", "MediaStorageSOPInstanceUID")):
            if not getattr(ds, keyword, "") and meta is not None:
                setattr(ds, keyword, meta.get(meta_keyword, ""))
        if not ds.SOPClassUID or not ds.SOPInstanceUID:
            raise InvalidInputError(f"{folder}: a slice has no SOP class or instance UID; DICOM outputs cannot "
                                    "reference it")
        for keyword in TYPE_2:  # present, possibly empty, in every derived object: exports often drop them
            if keyword not in ds:
                setattr(ds, keyword, "")
    seed = str(datasets[0].SOPInstanceUID)
    notes = []
    for keyword in ("SeriesInstanceUID", "StudyInstanceUID", "FrameOfReferenceUID"):
        values = {str(getattr(ds, keyword, "") or "") for ds in datasets}
        if values == {""}:
            derived = generate_uid(entropy_srcs=[keyword, seed])
            for ds in datasets:
                setattr(ds, keyword, derived)
            notes.append(f"the series has no {keyword}; the DICOM output references {derived}, derived from its "
                         "first slice")
        elif "" in values or len(values) > 1:
            raise InvalidInputError(f"{folder}: its slices disagree on the {keyword}")
    return datasets, notes


def series_grid(datasets: list) -> sitk.Image:
    """An empty image with the series' own grid: axis 0 along its rows, 1 down its columns, 2 through its slices
    in file order (so that slice k of an array on this grid is `datasets[k]`)."""
    first = datasets[0]
    orient = np.asarray(first.ImageOrientationPatient, dtype=np.float64)
    row_dir, col_dir = orient[:3], orient[3:]
    rows_mm, cols_mm = (float(v) for v in first.PixelSpacing)  # between rows, between columns
    start = np.asarray(first.ImagePositionPatient, dtype=np.float64)
    if len(datasets) > 1:
        step = np.asarray(datasets[-1].ImagePositionPatient, dtype=np.float64) - start
        gap = float(np.linalg.norm(step)) / (len(datasets) - 1)
        normal = step / np.linalg.norm(step)
    else:
        gap = float(getattr(first, "SliceThickness", 1.0) or 1.0)
        normal = np.cross(row_dir, col_dir)
    grid = sitk.Image(int(first.Columns), int(first.Rows), len(datasets), sitk.sitkUInt8)
    grid.SetOrigin(tuple(start))
    grid.SetSpacing((cols_mm, rows_mm, gap))
    grid.SetDirection(tuple(np.column_stack([row_dir, col_dir, normal]).ravel()))
    return grid


def labels_on_series(labels: Image, datasets: list) -> np.ndarray:
    """The label map carried onto the series' slices: (n_slices, rows, columns) uint8, slice k on datasets[k]."""
    moved = sitk.Resample(labels.to_sitk(), series_grid(datasets), sitk.Transform(), sitk.sitkNearestNeighbor, 0)
    return sitk.GetArrayFromImage(moved).astype(np.uint8)


def write_dicom_seg(labels: Image, folder: str | os.PathLike, names: list[str], path: str | os.PathLike,
                    chosen: list[int] | None = None, version: str = "") -> tuple[int, list[str]]:
    """Write the organs of `labels` with voxels (label k + 1 for each k of `chosen`, default all) as a binary
    DICOM-SEG of the series in `folder`; returns the number of segments (an organ without voxels has none) and
    `read_series`'s notes."""
    _pydicom()
    try:
        import highdicom as hd
        from pydicom.sr.coding import Code
    except ImportError:
        raise InvalidInputError("--format dicom-seg needs highdicom: pip install 'imageforest[dicom]'") from None
    datasets, notes = read_series(folder, pixels=True)
    frames = labels_on_series(labels, datasets)
    present = [k for k in (range(len(names)) if chosen is None else chosen) if np.any(frames == k + 1)]
    # Segment numbers run 1..n over the organs written; the label map is renumbered so
    renumber = np.zeros(max(len(names), int(frames.max())) + 1, np.uint8)
    for number, k in enumerate(present, start=1):
        renumber[k + 1] = number
    pixel = renumber[frames]
    family = Code("123110", "DCM", "Artificial Intelligence")
    algorithm = hd.AlgorithmIdentificationSequence(name="imageforest entangled decision forest", family=family,
                                                   version=version or "unknown")
    descriptions = []
    for number, k in enumerate(present, start=1):
        value, meaning = SNOMED.get(names[k], ORGAN)
        colour = COLOURS[k % len(COLOURS)]
        descriptions.append(hd.seg.SegmentDescription(
            segment_number=number, segment_label=names[k][:64],
            segmented_property_category=Code("91723000", "SCT", "Anatomical Structure"),
            segmented_property_type=Code(value, "SCT", meaning),
            algorithm_type=hd.seg.SegmentAlgorithmTypeValues.AUTOMATIC, algorithm_identification=algorithm,
            display_color=hd.color.CIELabColor(*_rgb_to_lab(colour))))
    if not descriptions:
        raise InvalidInputError(f"{folder}: no organ has voxels; a DICOM-SEG needs at least one segment")
    first = datasets[0]
    seg = hd.seg.Segmentation(
        source_images=datasets, pixel_array=pixel, segmentation_type=hd.seg.SegmentationTypeValues.BINARY,
        segment_descriptions=descriptions, series_instance_uid=hd.UID(),
        series_number=int(getattr(first, "SeriesNumber", 0) or 0) + 900, sop_instance_uid=hd.UID(),
        instance_number=1, manufacturer="imageforest", manufacturer_model_name="imageforest contour",
        software_versions=version or "unknown", device_serial_number="none", series_description="Organ contours",
        content_label="ORGANS", content_description="Organ contours by an entangled decision forest")
    seg.save_as(str(path))
    return len(descriptions), notes


def _rgb_to_lab(rgb: tuple[int, int, int]) -> tuple[float, float, float]:
    """sRGB (0-255) to CIE L*a*b* (D65), as DICOM's recommended display colours are given."""
    c = np.asarray(rgb, dtype=np.float64) / 255.0
    c = np.where(c > 0.04045, ((c + 0.055) / 1.055) ** 2.4, c / 12.92)
    xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]) @ c
    xyz /= np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return float(116 * f[1] - 16), float(500 * (f[0] - f[1])), float(200 * (f[1] - f[2]))


def slice_contours(mask: np.ndarray) -> list[np.ndarray]:
    """Closed contours of one slice's mask (rows, columns) bool: each (n, 2) float (row, column), around the
    mask's pixel centres at the half-way level, first point not repeated."""
    from skimage.measure import find_contours

    padded = np.pad(mask.astype(np.uint8), 1)
    out = []
    for c in find_contours(padded, 0.5):
        c = c - 1.0
        if len(c) > 1 and np.allclose(c[0], c[-1]):
            c = c[:-1]
        if len(c) >= 3:
            out.append(c)
    return out


def write_rtstruct(labels: Image, folder: str | os.PathLike, names: list[str], path: str | os.PathLike,
                   chosen: list[int] | None = None, version: str = "") -> tuple[int, list[str]]:
    """Write the organs of `labels` (each k of `chosen`, default all) as an RT Structure Set of the series in
    `folder`: one ROI per organ, closed planar contours on the slices it covers, each contour referencing its
    slice; returns the number of ROIs with contours (an organ without voxels is listed with none) and
    `read_series`'s notes."""
    pydicom = _pydicom()
    from pydicom.dataset import Dataset, FileMetaDataset
    from pydicom.sequence import Sequence
    from pydicom.uid import ExplicitVRLittleEndian, generate_uid

    datasets, notes = read_series(folder)
    frames = labels_on_series(labels, datasets)
    first = datasets[0]
    chosen = list(range(len(names))) if chosen is None else chosen
    now = datetime.datetime.now()

    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = RTSTRUCT_SOP_CLASS
    meta.MediaStorageSOPInstanceUID = generate_uid()
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds = pydicom.dataset.FileDataset(str(path), {}, file_meta=meta, preamble=b"\0" * 128)
    ds.SOPClassUID = RTSTRUCT_SOP_CLASS
    ds.SOPInstanceUID = meta.MediaStorageSOPInstanceUID
    ds.Modality = "RTSTRUCT"
    for keyword in ("PatientName", "PatientID", "PatientBirthDate", "PatientSex", "StudyInstanceUID", "StudyDate",
                    "StudyTime", "StudyID", "AccessionNumber", "ReferringPhysicianName", "FrameOfReferenceUID",
                    "SpecificCharacterSet"):
        setattr(ds, keyword, getattr(first, keyword, ""))
    ds.SeriesInstanceUID = generate_uid()
    ds.SeriesNumber = int(getattr(first, "SeriesNumber", 0) or 0) + 901
    ds.SeriesDescription = "Organ contours"
    ds.InstanceNumber = 1
    ds.Manufacturer = "imageforest"
    ds.ManufacturerModelName = "imageforest contour"
    ds.SoftwareVersions = version or "unknown"
    ds.StructureSetLabel = "ORGANS"
    ds.StructureSetName = "Organ contours"
    ds.StructureSetDate = ds.InstanceCreationDate = now.strftime("%Y%m%d")
    ds.StructureSetTime = ds.InstanceCreationTime = now.strftime("%H%M%S")
    ds.ApprovalStatus = "UNAPPROVED"

    def image_ref(k: int) -> Dataset:
        ref = Dataset()
        ref.ReferencedSOPClassUID = datasets[k].SOPClassUID
        ref.ReferencedSOPInstanceUID = datasets[k].SOPInstanceUID
        return ref

    series_ref = Dataset()
    series_ref.SeriesInstanceUID = first.SeriesInstanceUID
    series_ref.ContourImageSequence = Sequence([image_ref(k) for k in range(len(datasets))])
    study_ref = Dataset()
    study_ref.ReferencedSOPClassUID = STUDY_SOP_CLASS
    study_ref.ReferencedSOPInstanceUID = first.StudyInstanceUID
    study_ref.RTReferencedSeriesSequence = Sequence([series_ref])
    frame_ref = Dataset()
    frame_ref.FrameOfReferenceUID = first.FrameOfReferenceUID
    frame_ref.RTReferencedStudySequence = Sequence([study_ref])
    ds.ReferencedFrameOfReferenceSequence = Sequence([frame_ref])

    rois, roi_contours, observations, with_contours = [], [], [], 0
    for number, k in enumerate(chosen, start=1):
        roi = Dataset()
        roi.ROINumber = number
        roi.ReferencedFrameOfReferenceUID = first.FrameOfReferenceUID
        roi.ROIName = names[k][:64]
        roi.ROIGenerationAlgorithm = "AUTOMATIC"
        rois.append(roi)
        contours = []
        for s in np.flatnonzero((frames == k + 1).any(axis=(1, 2))):
            position = np.asarray(datasets[s].ImagePositionPatient, dtype=np.float64)
            orient = np.asarray(datasets[s].ImageOrientationPatient, dtype=np.float64)
            rows_mm, cols_mm = (float(v) for v in datasets[s].PixelSpacing)
            for c in slice_contours(frames[s] == k + 1):
                # DICOM: a pixel's position is the slice's position plus column * column spacing along the row
                # direction plus row * row spacing along the column direction (LPS mm)
                xyz = position + np.outer(c[:, 1] * cols_mm, orient[:3]) + np.outer(c[:, 0] * rows_mm, orient[3:])
                item = Dataset()
                item.ContourImageSequence = Sequence([image_ref(s)])
                item.ContourGeometricType = "CLOSED_PLANAR"
                item.NumberOfContourPoints = len(xyz)
                item.ContourData = [f"{v:.3f}" for v in xyz.ravel()]
                contours.append(item)
        roi_contour = Dataset()
        roi_contour.ReferencedROINumber = number
        roi_contour.ROIDisplayColor = list(COLOURS[k % len(COLOURS)])
        if contours:
            roi_contour.ContourSequence = Sequence(contours)
            with_contours += 1
        roi_contours.append(roi_contour)
        observation = Dataset()
        observation.ObservationNumber = number
        observation.ReferencedROINumber = number
        observation.RTROIInterpretedType = "ORGAN"
        observation.ROIInterpreter = ""
        observations.append(observation)
    ds.StructureSetROISequence = Sequence(rois)
    ds.ROIContourSequence = Sequence(roi_contours)
    ds.RTROIObservationsSequence = Sequence(observations)
    ds.save_as(str(path), enforce_file_format=True)
    return with_contours, notes


def check_dicom_source(scan: Path, fmt: str) -> None:
    """Refuse a DICOM output for a scan that is not a DICOM series folder (one line)."""
    if fmt != "nifti" and not Path(scan).is_dir():
        raise InvalidInputError(f"{scan}: --format {fmt} references the scan's DICOM series; give the series "
                                "folder as the scan (or --format nifti)")
