"""CT organ localization by regression voting: `imageforest localize scan.nii.gz` (seeds/000 sec. 4.5)."""
