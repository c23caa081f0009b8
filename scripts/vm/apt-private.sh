# shellcheck shell=bash
# Sourced by scripts/vm/kernel.sh and scripts/vm/llama-root.sh. apt_private CACHE SUITE MIRROR:
# sets the array apt_private_opts to apt-get options that read only SUITE (main, from MIRROR)
# through a private sources list, lists and cache under CACHE/apt-SUITE, so the host's apt
# configuration stays as it is, and reads that suite's package lists; if that fails, prints
# apt's output and returns 1.
apt_private() {
  local priv=$1/apt-$2 log
  mkdir -p "$priv/lists/partial" "$priv/cache/archives/partial"
  # apt-get runs as _apt when it can.
  chmod -R a+rwX "$priv"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $3 $2 main" >"$priv/sources.list"
  apt_private_opts=(-o "Dir::Etc::sourcelist=$priv/sources.list" -o Dir::Etc::sourceparts=-
    -o "Dir::State::Lists=$priv/lists" -o "Dir::Cache=$priv/cache")
  echo "vm: reading the package lists of $2 (private apt state in $priv)" >&2
  log=$(apt-get "${apt_private_opts[@]}" -q update 2>&1) || {
    echo "$log" >&2
    return 1
  }
}
