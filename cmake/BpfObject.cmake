# bpf_object(NAME SOURCE)
#
# Compiles bpf/NAME.bpf.c with clang -target bpf against the pinned vmlinux.h,
# generates NAME.skel.h with `bpftool gen skeleton`, and yields an INTERFACE
# target `bpf_NAME` whose include path holds the skeleton.
#
# The vmlinux.h is the one checked in under bpf/vmlinux/<arch>/: programs are
# CO-RE, so the build never depends on the build machine's kernel matching the
# target's (regenerate it with scripts/gen-vmlinux.sh).

find_program(BPF_CLANG NAMES clang-19 clang-16 clang-15 clang-14 clang REQUIRED)
find_program(BPFTOOL NAMES bpftool PATHS /usr/sbin /sbin REQUIRED)

if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  set(BPF_TARGET_ARCH x86)
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "aarch64|arm64")
  set(BPF_TARGET_ARCH arm64)
else()
  message(FATAL_ERROR "kvtier: no pinned vmlinux.h for ${CMAKE_SYSTEM_PROCESSOR}")
endif()
set(BPF_VMLINUX_DIR ${CMAKE_SOURCE_DIR}/bpf/vmlinux/${BPF_TARGET_ARCH})
if(NOT EXISTS ${BPF_VMLINUX_DIR}/vmlinux.h)
  message(FATAL_ERROR "kvtier: ${BPF_VMLINUX_DIR}/vmlinux.h is missing; run scripts/gen-vmlinux.sh")
endif()

function(bpf_object name src)
  set(out_dir ${CMAKE_CURRENT_BINARY_DIR}/bpf_gen)
  set(obj ${out_dir}/${name}.bpf.o)
  set(skel ${out_dir}/${name}.skel.h)
  file(MAKE_DIRECTORY ${out_dir})
  add_custom_command(
    OUTPUT ${obj}
    COMMAND ${BPF_CLANG} -g -O2 -Wall -Werror -target bpf
            -D__TARGET_ARCH_${BPF_TARGET_ARCH}
            -I${BPF_VMLINUX_DIR} -I${CMAKE_SOURCE_DIR}/bpf
            -MD -MF ${obj}.d
            -c ${CMAKE_CURRENT_SOURCE_DIR}/${src} -o ${obj}
    DEPENDS ${src} ${CMAKE_SOURCE_DIR}/bpf/kvtier_abi.h
    DEPFILE ${obj}.d
    COMMENT "BPF ${name}"
    VERBATIM)
  add_custom_command(
    OUTPUT ${skel}
    COMMAND ${BPFTOOL} gen skeleton ${obj} name ${name}_bpf > ${skel}
    DEPENDS ${obj}
    COMMENT "BPF skeleton ${name}.skel.h"
    VERBATIM)
  add_custom_target(bpf_${name}_gen DEPENDS ${skel})
  add_library(bpf_${name} INTERFACE)
  add_dependencies(bpf_${name} bpf_${name}_gen)
  target_include_directories(bpf_${name} SYSTEM INTERFACE ${out_dir})
endfunction()
