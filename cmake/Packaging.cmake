# The Debian package (`cpack -G DEB`, or scripts/package.sh): kvtierd, kvtierctl, the unit,
# the sysusers.d snippet that creates the kvtier group, the default config (a conffile), the
# man pages and docs, as `cmake --install` puts them. Build it from a tree configured with
# -DCMAKE_INSTALL_PREFIX=/usr (scripts/setup.sh does): the unit's paths and kvtierd's default
# --config are taken from the prefix at configure time.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME kvtier)
set(CPACK_PACKAGE_VENDOR kvtier)
set(CPACK_PACKAGE_CONTACT "kvtier maintainers <kvtier@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "KV-cache memory tiering daemon (DRAM <-> CXL)")
set(CPACK_PACKAGE_DESCRIPTION
    "kvtierd keeps the hot part of LLM inference hosts' KV caches in DRAM and moves the cold\n\
part to CXL memory (a CPU-less NUMA node), using eBPF and kernel samplers for heat and\n\
move_pages(2) to move. kvtierctl shows what it does. The service is not enabled on\n\
install: review /etc/kvtier/kvtier.toml, then systemctl enable --now kvtierd.")
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION admin)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# Library dependencies from dpkg-shlibdeps on the built binaries (the build host's
# libraries: build on the Debian release you install to). init-system-helpers gives
# deb-systemd-helper/-invoke to the maintainer scripts; passwd gives groupadd where
# systemd-sysusers is absent; procps gives the unit's ExecReload its /bin/kill (a minimal
# Debian 12 has none: `systemctl reload` failed there without it).
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "init-system-helpers (>= 1.54~), passwd, procps")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "systemd")
# kvtierctl replay --png draws with matplotlib (/usr/share/kvtier/replay_plot.py); nothing else
# needs python.
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "python3-matplotlib")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${PROJECT_SOURCE_DIR}/packaging/deb/conffiles ${PROJECT_SOURCE_DIR}/packaging/deb/postinst
    ${PROJECT_SOURCE_DIR}/packaging/deb/prerm ${PROJECT_SOURCE_DIR}/packaging/deb/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
# Only the runtime: the test and benchmark programs are not installed.
set(CPACK_STRIP_FILES ON)
include(CPack)
