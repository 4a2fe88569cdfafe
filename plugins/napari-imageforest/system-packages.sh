#!/bin/sh
# The Debian packages napari's Qt window needs on a machine without a display: an X server in memory (Xvfb) and
# the xcb libraries Qt's platform plugin loads. Installed when missing and when we may (root); otherwise a note,
# and the plugin's tests skip with the reason.
set -e
missing=""
command -v Xvfb >/dev/null 2>&1 || missing="$missing xvfb"
for lib in libxcb-icccm.so.4 libxcb-image.so.0 libxcb-keysyms.so.1 libxcb-randr.so.0 libxcb-render-util.so.0 \
           libxcb-xinerama.so.0 libxcb-xfixes.so.0 libxcb-shape.so.0 libxcb-cursor.so.0 libxkbcommon-x11.so.0 \
           libEGL.so.1 libGL.so.1 libdbus-1.so.3 libfontconfig.so.1; do
    ldconfig -p 2>/dev/null | grep -q "$lib" || missing="$missing $lib"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "napari-imageforest: missing$missing (install Xvfb and Qt's xcb libraries to run the plugin's tests)" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
# A failure here is reported, not fatal: without a display the plugin's tests skip with the reason.
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends xvfb xauth libxcb-icccm4 \
        libxcb-image0 libxcb-keysyms1 libxcb-randr0 libxcb-render-util0 libxcb-xinerama0 libxcb-xfixes0 \
        libxcb-shape0 libxcb-cursor0 libxkbcommon-x11-0 libegl1 libgl1 libgl1-mesa-dri libdbus-1-3 \
        libfontconfig1 >/dev/null; }; then
    echo "napari-imageforest: could not install$missing; the plugin's tests will skip" >&2
fi
