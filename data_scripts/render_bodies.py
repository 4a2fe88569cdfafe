"""Render synthetic depth images of human bodies with part labels and joints (the training and test data of the
body-parts application).

    python data_scripts/render_bodies.py -n N -o DIR --seed S [--size 320x240|640x480] [--sheet PNG]

The renderer belongs to the application, so that an installed package has it too
(`python -m imageforest.apps.bodyparts.renderer`); this script runs it from a checkout.
"""

from imageforest.apps.bodyparts.renderer import main

if __name__ == "__main__":
    main()
