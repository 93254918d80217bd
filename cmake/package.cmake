# The Debian package (docs/install.md): `cpack -G DEB` in the build directory, from the install
# rules of cmake/install.cmake with CMAKE_INSTALL_PREFIX /usr. Dependencies are computed from the
# installed binaries by dpkg-shlibdeps (liburing, zstd, and CRIU's libraries for the bundled CRIU);
# a system CRIU is not needed while gcr's own is bundled.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME gcr)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "gcr developers <gcr-developers@users.noreply.github.com>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "transparent checkpoint/restore for GPU processes")
set(CPACK_PACKAGE_DESCRIPTION
    "gcr checkpoints a running CUDA process without changing it and restores it\n"
    "later, on the same GPU, another GPU or another host. Device memory is parked\n"
    "in a daemon (gcrd), stored deduplicated and reloaded on demand; CRIU saves\n"
    "the rest. Includes simgpu, a simulated GPU for machines without a driver.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION admin)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_STRIP_FILES ON)  # the build is RelWithDebInfo: the package need not carry that
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# gcrd links libcuda.so.1: the NVIDIA driver where there is one, else simgpu, shipped here.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS usr/lib/gcr/simgpu)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "iproute2")
if(NOT (GCR_INSTALL_CRIU AND EXISTS "${GCR_BUNDLED_CRIU}"))
  string(APPEND CPACK_DEBIAN_PACKAGE_DEPENDS ", criu (>= 4.2)")
endif()
install(FILES ${CMAKE_SOURCE_DIR}/packaging/debian/copyright DESTINATION ${CMAKE_INSTALL_DOCDIR})
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    "${CMAKE_SOURCE_DIR}/packaging/debian/postinst;${CMAKE_SOURCE_DIR}/packaging/debian/prerm;${CMAKE_SOURCE_DIR}/packaging/debian/postrm")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
