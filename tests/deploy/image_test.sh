#!/usr/bin/env bash
# The container image is complete: scripts/image.sh builds it (Containerfile), its filesystem
# is exported, and the image's own ENTRYPOINT runs from that root under chroot, as the image's
# USER, with its Env and WorkingDir (read back with `podman inspect`), in fresh network and
# mount namespaces as a container would. Then a completion, and the image's HEALTHCHECK
# command run inside that root, must succeed; SIGTERM must drain and exit 0.
# `podman run` is not used because some sandboxes (and this CI's) refuse to start containers.
set -u
REPO="$1"
WORK="$(mktemp -d)"
podman=(podman --storage-driver vfs)
CID=""
cleanup() {
  [ -n "$CID" ] && "${podman[@]}" rm --force "$CID" >/dev/null 2>&1
  rm -rf "$WORK"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
missing() {
  case ",${KVW_ALLOW_SKIP:-}," in *,podman,*) echo "SKIP: $1"; exit 77 ;; esac
  fail "$1: install podman and mmdebstrap as root, or set KVW_ALLOW_SKIP=podman"
}
for tool in podman mmdebstrap unshare chroot; do
  command -v $tool >/dev/null || missing "no $tool"
done
[ "$(id -u)" -eq 0 ] || missing "needs root (rootful podman storage, chroot, unshare)"

t0=$SECONDS
IMAGE=$(bash "$REPO/scripts/image.sh") || fail "scripts/image.sh"
echo "built $IMAGE in $((SECONDS - t0)) s"
"${podman[@]}" image inspect "$IMAGE" >"$WORK/config.json" ||
  fail "podman inspect"
CID=$("${podman[@]}" create "$IMAGE") || fail "podman create"
mkdir "$WORK/root"
"${podman[@]}" export "$CID" | tar -x -C "$WORK/root" || fail "podman export"
echo "image root: $(du -sm "$WORK/root" | cut -f1) MiB"

# The image's config as shell words: user:group, working directory, environment, command and
# the health check (CMD-SHELL or CMD).
/usr/bin/python3 - "$WORK/config.json" "$WORK/root/etc/passwd" >"$WORK/config.sh" <<'PY' ||
import json, shlex, sys
image = json.load(open(sys.argv[1]))[0]
c = image['Config']
user = c.get('User') or '0'
uid, _, gid = user.partition(':')
for line in open(sys.argv[2]):
    f = line.split(':')
    if f[0] == uid or f[2] == uid:
        uid, gid = f[2], gid or f[3]
q = lambda words: ' '.join(shlex.quote(w) for w in words)
hc = (c.get('Healthcheck') or image['Healthcheck'])['Test']  # docker's place, podman's
print('USERSPEC=%s' % shlex.quote(uid + ':' + (gid or '0')))
print('WORKDIR=%s' % shlex.quote(c.get('WorkingDir') or '/'))
env = c.get('Env') or []
if not any(e.startswith('PATH=') for e in env):  # what podman and docker run add
    env.append('PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin')
print('ENVS=(%s)' % q(env))
print('COMMAND=(%s)' % q((c.get('Entrypoint') or []) + (c.get('Cmd') or [])))
print('HEALTHCHECK=(%s)' % q(['/bin/sh', '-c', hc[1]] if hc[0] == 'CMD-SHELL' else hc[1:]))
print('PORTS=(%s)' % q(p.split('/')[0] for p in c.get('ExposedPorts', {})))
PY
  fail "reading the image config: $(cat "$WORK/config.json")"
cat "$WORK/config.sh"

# Runs inside the new namespaces: the entrypoint in the background, then the checks.
cat >"$WORK/inside.sh" <<'IN'
set -u
. "$WORK/config.sh"
ROOT="$WORK/root"
ip link set lo up
mount -t proc proc "$ROOT/proc"
mount --rbind /dev "$ROOT/dev"
# A plain command (no function), so that $! below is the server itself (chroot and env exec).
in_image=(chroot --userspec="$USERSPEC" "$ROOT" /usr/bin/env -i -C "$WORKDIR" "${ENVS[@]}")
[ "$USERSPEC" != "0:0" ] || { echo "FAIL: the image runs as root"; exit 1; }
"${in_image[@]}" "${COMMAND[@]}" >"$WORK/serve.out" 2>"$WORK/serve.err" &
pid=$!
# A failed check must not leave the server behind (it holds its whole budget).
trap 'kill -KILL $pid 2>/dev/null' EXIT
# The default serve pre-faults its 3.3 GiB budget: seconds on a loaded machine.
for _ in $(seq 1 600); do grep -q "kvwarden serving" "$WORK/serve.out" && break; sleep 0.1; done
grep -q "kvwarden serving" "$WORK/serve.out" || { echo "FAIL: did not start:"; cat "$WORK/serve.err"; exit 1; }
cat "$WORK/serve.out"
port=${PORTS[0]}
curl -sf "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt": "And God said", "max_tokens": 8, "temperature": 0}' >"$WORK/completion.json" ||
  { echo "FAIL: no completion on the exposed port $port"; exit 1; }
cat "$WORK/completion.json"; echo
"${in_image[@]}" "${HEALTHCHECK[@]}" || { echo "FAIL: the image's HEALTHCHECK failed"; exit 1; }
echo "HEALTHCHECK passed"
kill -TERM $pid
wait $pid
rc=$?
[ $rc -eq 0 ] || { echo "FAIL: serve exited $rc after SIGTERM"; cat "$WORK/serve.err"; exit 1; }
IN
WORK="$WORK" unshare --net --mount --fork bash "$WORK/inside.sh" || fail "running the image"
/usr/bin/python3 -c "
import json, sys
c = json.load(open('$WORK/completion.json'))
assert c['object'] == 'text_completion' and c['usage']['completion_tokens'] == 8, c
assert c['model'] == 'default', c['model']
" || fail "unexpected completion"
echo PASS
