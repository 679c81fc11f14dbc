# Cross build for 64-bit Arm Linux with Debian's cross compiler and multiarch libraries:
#   apt-get install gcc-aarch64-linux-gnu qemu-user
#   dpkg --add-architecture arm64 && apt-get update
#   apt-get install libjansson-dev:arm64 libpcre2-dev:arm64 libutf8proc-dev:arm64 \
#                   libcurl4-openssl-dev:arm64        (scripts/deps-arm64.sh does all this)
#   cmake -S . -B build-arm64 -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64.cmake
# ctest then runs every test under qemu-aarch64 (QEMU_CPU=cortex-a72 picks a CPU without bf16).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(EMBER_CROSS_TRIPLE aarch64-linux-gnu)
set(CMAKE_C_COMPILER ${EMBER_CROSS_TRIPLE}-gcc)

# Headers and libraries of the arm64 -dev packages live in Debian's multiarch directories; the
# cross compiler already searches them. pkg-config must see only the arm64 .pc files.
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/${EMBER_CROSS_TRIPLE}/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")

# Test executables run under user-mode emulation. The arm64 -dev packages bring Debian's arm64 C
# library (libc6:arm64, multiarch), whose loader is /lib/ld-linux-aarch64.so.1: qemu finds it and
# the libraries in /lib/aarch64-linux-gnu by their own paths. Do not add `-L /usr/aarch64-linux-gnu`
# then: that pairs the cross package's loader with the multiarch libc.so.6, two different builds
# of glibc, and pthread_create hangs (qemu 7.2, glibc 2.36-8cross1 vs 2.36-9+deb12u14).
find_program(EMBER_QEMU_AARCH64 qemu-aarch64)
if(EMBER_QEMU_AARCH64)
  if(EXISTS /lib/ld-linux-aarch64.so.1)
    set(CMAKE_CROSSCOMPILING_EMULATOR ${EMBER_QEMU_AARCH64})
  else()
    set(CMAKE_CROSSCOMPILING_EMULATOR ${EMBER_QEMU_AARCH64} -L /usr/${EMBER_CROSS_TRIPLE})
  endif()
endif()
