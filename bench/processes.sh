# Sourced by bench/load and bench/profile: installing what a run needs, a work directory, and
# the processes a run starts, stopped when it ends however it ends.

# Installs Debian package $2 if command $1 is missing.
need() {
    command -v "$1" >/dev/null && return 0
    if [ "$(id -u)" = 0 ]; then apt-get install -y "$2" >/dev/null; else sudo apt-get install -y "$2" >/dev/null; fi
}

work="$(mktemp -d)"
chmod 755 "$work"
# The processes started with `started`, stopped on exit, then the work directory removed.
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    # Gone before their files are: a proxy would log its configuration file's removal.
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

# Records the last background process, to be stopped on exit.
started() { pids+=($!); }

# Waits up to 10 s for something to listen on 127.0.0.1 port $1.
wait_port() {
    for _ in $(seq 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.1
    done
    echo "port $1 did not open" >&2
    exit 1
}
