"""`bayesncl arrange-val`: the flat official ILSVRC-2012 val/ sorted into class folders, from tiny files written in
the real formats (LOC_val_solution.csv; the devkit's ground truth with meta.mat), read by the ImageNet-100 check."""

import os

import numpy as np
import pytest
import scipy.io

from bayesncl.cli.main import main
from bayesncl.data.ilsvrc_val import arrange_val, read_val_labels
from bayesncl.data.imagenet import check_imagenet100
from bayesncl.core.errors import DataError

# ILSVRC2012_ID -> wnid as in the devkit (1: tench, 2: goldfish, 3: great white shark); the images' classes
IDS = {1: "n01440764", 2: "n01443537", 3: "n01484850"}
TRUTH = [2, 1, 3, 1, 2, 2]  # image 1 is a goldfish, ...


@pytest.fixture
def flat(tmp_path):
    """An ImageNet root whose val/ is flat as it ships, a train/ with the classes, and both label files."""
    root = tmp_path / "imagenet"
    (root / "val").mkdir(parents=True)
    for n in range(1, len(TRUTH) + 1):
        (root / "val" / f"ILSVRC2012_val_{n:08d}.JPEG").write_bytes(f"image {n}".encode())
    for w in IDS.values():
        (root / "train" / w).mkdir(parents=True)
    csv = tmp_path / "LOC_val_solution.csv"
    csv.write_text("ImageId,PredictionString\n" + "".join(
        f"ILSVRC2012_val_{n:08d},{IDS[c]} 10 20 200 300 {IDS[c]} 1 2 30 40\n"
        for n, c in reversed(list(enumerate(TRUTH, start=1)))))  # the CSV's rows are in no order
    truth = tmp_path / "ILSVRC2012_validation_ground_truth.txt"
    truth.write_text("".join(f"{c}\n" for c in TRUTH))
    synsets = np.array([(i, w, "words", 0) for i, w in IDS.items()] + [(1001, "n00001740", "entity", 3)],
                       dtype=[("ILSVRC2012_ID", "O"), ("WNID", "O"), ("words", "O"), ("num_children", "O")])
    meta = tmp_path / "meta.mat"
    scipy.io.savemat(meta, {"synsets": synsets})
    classes = tmp_path / "classes.txt"
    classes.write_text(f"{IDS[1]}\n{IDS[2]}\n")
    return root, csv, truth, meta, classes


def expected(wnids):
    return {w: sorted(f"ILSVRC2012_val_{n:08d}.JPEG" for n, c in enumerate(TRUTH, start=1) if IDS[c] == w)
            for w in wnids}


def tree(val):
    return {d.name: sorted(p.name for p in d.iterdir()) for d in val.iterdir() if d.is_dir()}


def test_both_label_files_read_the_same(flat):
    root, csv, truth, meta, _ = flat
    want = {f"ILSVRC2012_val_{n:08d}": IDS[c] for n, c in enumerate(TRUTH, start=1)}
    assert read_val_labels(csv) == want
    assert read_val_labels(truth, meta) == want


def test_the_classes_of_the_list_are_hard_linked_and_pass_the_check(flat, capsys):
    root, csv, truth, meta, classes = flat
    with pytest.raises(DataError, match="flat official val/ is sorted into class folders by `bayesncl arrange-val"):
        check_imagenet100(root, classes=str(classes))  # the pre-flight's message names the command
    assert main(["arrange-val", str(root), "--labels", str(csv), "--classes", str(classes), "--quiet"]) == 0
    assert "2 class folders made, 0 already there (5 images, hard links)" in capsys.readouterr().out
    val = root / "val"
    assert tree(val) == expected([IDS[1], IDS[2]])
    linked = val / IDS[2] / "ILSVRC2012_val_00000001.JPEG"
    assert linked.read_bytes() == b"image 1" and os.path.samefile(linked, val / "ILSVRC2012_val_00000001.JPEG")
    check_imagenet100(root, classes=str(classes))  # the loader's check takes the arranged folder
    # a rerun keeps what is there
    assert arrange_val(root, csv, classes=str(classes), progress=False)[0].endswith(
        "0 class folders made, 2 already there (5 images, hard links)")


def test_devkit_labels_all_classes_as_symlinks(flat):
    root, csv, truth, meta, _ = flat
    arrange_val(root, truth, meta, classes="all", symlink=True, progress=False)
    val = root / "val"
    assert tree(val) == expected(IDS.values())
    link = val / IDS[3] / "ILSVRC2012_val_00000003.JPEG"
    assert link.is_symlink() and os.readlink(link) == "../ILSVRC2012_val_00000003.JPEG"
    assert link.read_bytes() == b"image 3"


def test_an_interrupted_run_leaves_no_half_class_folder(flat, monkeypatch):
    root, csv, truth, meta, classes = flat
    import bayesncl.data.ilsvrc_val as iv

    real, calls = iv._link, []

    def dies_on_the_fourth(src, dst, symlink):
        calls.append(dst)
        if len(calls) == 4:
            raise KeyboardInterrupt
        real(src, dst, symlink)

    monkeypatch.setattr(iv, "_link", dies_on_the_fourth)
    with pytest.raises(KeyboardInterrupt):
        arrange_val(root, csv, classes="all", progress=False)
    # the first class (3 images) is whole; the second, cut after one image, is not there under its name
    assert tree(root / "val") == {**expected([IDS[1]]), f".{IDS[2]}.arranging": ["ILSVRC2012_val_00000001.JPEG"]}
    monkeypatch.setattr(iv, "_link", real)
    arrange_val(root, csv, classes="all", progress=False)
    assert tree(root / "val") == expected(IDS.values())


def test_bad_input_names_the_file_and_the_fix(flat, tmp_path, capsys):
    root, csv, truth, meta, classes = flat
    with pytest.raises(DataError, match="give --meta"):
        read_val_labels(truth)
    bad = tmp_path / "bad.csv"
    bad.write_text("ImageId,PredictionString\nILSVRC2012_val_00000001,goldfish\n")
    with pytest.raises(DataError, match="line 2"):
        read_val_labels(bad)
    (root / "val" / "ILSVRC2012_val_00000004.JPEG").unlink()
    assert main(["arrange-val", str(root), "--labels", str(csv), "--classes", "all", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "1 of the 6 labelled images" in err and tree(root / "val") == {}
    (root / "val" / "ILSVRC2012_val_00000004.JPEG").write_bytes(b"image 4")
    (root / "val" / IDS[1]).mkdir()
    (root / "val" / IDS[1] / "other.JPEG").write_bytes(b"")
    with pytest.raises(DataError, match="remove the folder and rerun"):
        arrange_val(root, csv, classes="all", progress=False)
