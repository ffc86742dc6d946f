#!/bin/bash
# A Blender with a GUI (>= 5.0) for tests/gui on a Linux host that has none: Debian sid's
# blender in a debootstrap chroot, a virtual display (Xvfb, software GL), and a wrapper
# that runs it as if installed here. Run as root; each step is skipped once done.
#
#   tools/gui_blender.sh [DIR]        # default DIR=/work/blender-sid; ~1 min, ~300 MB
#   PAINTED_SKIN_BLENDER=DIR/blender PAINTED_SKIN_DISPLAY=:99 make test-gui
#   tools/gui_blender.sh --unmount [DIR]
#
# Debian's build runs the system Python (3.14 in sid) and lacks two things blender.org
# bundles: OpenImageIO's Python module (the passes' EXR writer) and cattrs (its own
# extension manager), installed here from Debian. The repository, ../shared and /tmp are
# bind-mounted at the same paths, so tests and the chroot see the same files.
set -euo pipefail
UNMOUNT=0
if [ "${1:-}" = "--unmount" ]; then UNMOUNT=1; shift; fi
DIR=${1:-/work/blender-sid}
ROOT=$DIR/rootfs
REPO=$(cd "$(dirname "$0")/.." && pwd)
SHARED=$(cd "$REPO/.." && pwd)/shared
# The chroot gets its own PATH: the host's (pyenv shims) would shadow its python3.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

if [ "$UNMOUNT" = 1 ]; then
  pkill -f "Xvfb :99" || true
  for m in tmp root/.pyenv "${SHARED#/}" "${REPO#/}" dev/pts dev sys proc; do
    # A mount a just-ended process still holds: detach it now, it goes once released.
    if mountpoint -q "$ROOT/$m"; then umount "$ROOT/$m" || umount -l "$ROOT/$m"; fi
  done
  exit 0
fi

command -v debootstrap >/dev/null || apt-get install -y debootstrap
mkdir -p "$DIR"
[ -x "$ROOT/usr/bin/apt-get" ] || debootstrap --variant=minbase sid "$ROOT" http://deb.debian.org/debian

mnt() {  # mnt SRC DST [ro]
  mkdir -p "$2"
  if ! mountpoint -q "$2"; then
    mount --bind "$1" "$2"
    if [ "${3:-}" = ro ]; then mount -o remount,bind,ro "$2"; fi
  fi
}
mountpoint -q "$ROOT/proc" || mount -t proc proc "$ROOT/proc"
mountpoint -q "$ROOT/sys" || mount -t sysfs sys "$ROOT/sys"
mnt /dev "$ROOT/dev"
mountpoint -q "$ROOT/dev/pts" || mount -t devpts devpts "$ROOT/dev/pts"
mnt "$REPO" "$ROOT$REPO" ro
[ -d "$SHARED" ] && mnt "$SHARED" "$ROOT$SHARED" ro
# The backend venv's base Python (pyenv) at the same path, so .venv-backend runs inside.
[ -d /root/.pyenv ] && mnt /root/.pyenv "$ROOT/root/.pyenv" ro
mnt /tmp "$ROOT/tmp"  # pytest's tmp_path and the X socket, seen on both sides
cp /etc/resolv.conf "$ROOT/etc/resolv.conf"

PKGS="blender xvfb xauth mesa-utils libgl1-mesa-dri xdotool imagemagick python3-numpy
      python3-cattr python3-requests python3-openimageio"
if ! chroot "$ROOT" dpkg -s $PKGS >/dev/null 2>&1; then
  # sid's Release file may look expired against this machine's clock: skip Valid-Until.
  chroot "$ROOT" /bin/bash -c 'export DEBIAN_FRONTEND=noninteractive
    APT="apt-get -o Acquire::Check-Valid-Until=false"
    $APT update && $APT install -y --no-install-recommends '"$(echo $PKGS)"
fi

cat > "$DIR/blender" <<WRAP
#!/bin/bash
# The chroot's Blender, run as if installed here (use as PAINTED_SKIN_BLENDER).
mountpoint -q "$ROOT$REPO" || "$REPO/tools/gui_blender.sh" "$DIR" >/dev/null
exec env -u PYTHONPATH -u PYTHONHOME PATH=$PATH \\
  chroot "$ROOT" /bin/bash -c 'cd "\$0" 2>/dev/null || cd /; exec blender "\$@"' "\$PWD" "\$@"
WRAP
chmod +x "$DIR/blender"

if ! pgrep -f "Xvfb :99" >/dev/null; then  # a stale socket from a dead Xvfb: remove it
  rm -f /tmp/.X11-unix/X99 /tmp/.X99-lock
  chroot "$ROOT" /bin/bash -c 'nohup Xvfb :99 -screen 0 1600x1000x24 -nolisten tcp \
      >/tmp/xvfb-99.log 2>&1 &'
  sleep 2
fi
chroot "$ROOT" blender --version | head -1
echo "display :99; PAINTED_SKIN_BLENDER=$DIR/blender"
