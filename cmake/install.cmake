# `cmake --install` (docs/install.md): what goes where, relative to CMAKE_INSTALL_PREFIX (and
# DESTDIR). The binaries find one another relative to themselves (cli/paths.cpp, gcr/criu.h), so
# an installed tree refers to nothing of the build tree:
#
#   bin/gcr                                  the command
#   libexec/gcr/gcrd, gcr-keeper             the daemon and its keeper
#   lib/gcr/libcuda.so.1                     the interposer: a private directory, never on the
#                                            dynamic linker's path (it would preload itself into
#                                            every CUDA program)
#   lib/gcr/simgpu/libcuda.so.1              simgpu, for machines without an NVIDIA driver
#   lib/gcr/criu-plugin/gcr_criu_plugin.so   the plugin directory gcr hands its own CRIU (-L)
#   lib/gcr/criu/criu                        gcr's patched CRIU (when set-up built one)
#   lib/criu/gcr_criu_plugin.so              a link where a system CRIU (prefix /usr) looks
#   lib/gcr/slurm/gcr_spank.so              gcr's SPANK plugin (plugstack.conf names it: docs/slurm.md)
#   lib/systemd/system/gcrd.{service,socket} gcrd as a service, started on first use
#   share/man/man1/gcr.1.gz                  generated from `gcr --help` of every command
#   share/doc/gcr/                           README and docs
include(GNUInstallDirs)
set(GCR_PRIVATE_DIR lib/gcr)

install(TARGETS gcr_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS gcrd gcr-keeper RUNTIME DESTINATION ${CMAKE_INSTALL_LIBEXECDIR}/gcr)
install(TARGETS gcr_interpose LIBRARY DESTINATION ${GCR_PRIVATE_DIR} NAMELINK_SKIP)
install(TARGETS simgpu LIBRARY DESTINATION ${GCR_PRIVATE_DIR}/simgpu NAMELINK_SKIP)
if(TARGET gcr_spank)
  install(TARGETS gcr_spank LIBRARY DESTINATION ${GCR_PRIVATE_DIR}/slurm)
endif()
if(TARGET gcr_criu_plugin)
  install(TARGETS gcr_criu_plugin LIBRARY DESTINATION ${GCR_PRIVATE_DIR}/criu-plugin)
  install(CODE "
    file(MAKE_DIRECTORY \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/lib/criu\")
    file(CREATE_LINK ../gcr/criu-plugin/gcr_criu_plugin.so
         \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/lib/criu/gcr_criu_plugin.so\" SYMBOLIC)")
endif()

# gcr's CRIU: the one set-up built (with gcr's patches), unless told to rely on a system CRIU.
# A cross build does not bundle it: set-up builds CRIU for the host (docs/arm64.md).
set(_gcr_install_criu ON)
if(CMAKE_CROSSCOMPILING)
  set(_gcr_install_criu OFF)
endif()
option(GCR_INSTALL_CRIU "Install the CRIU set-up built (.deps/criu) as lib/gcr/criu/criu"
       ${_gcr_install_criu})
set(GCR_BUNDLED_CRIU "${CMAKE_SOURCE_DIR}/.deps/criu/sbin/criu" CACHE FILEPATH "CRIU to install")
if(GCR_INSTALL_CRIU AND EXISTS "${GCR_BUNDLED_CRIU}")
  add_custom_command(
    OUTPUT ${CMAKE_BINARY_DIR}/criu-bundle/criu
    COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/criu-bundle
    COMMAND ${CMAKE_STRIP} -o ${CMAKE_BINARY_DIR}/criu-bundle/criu ${GCR_BUNDLED_CRIU}
    DEPENDS ${GCR_BUNDLED_CRIU}
    COMMENT "gcr's CRIU, stripped, for the install")
  add_custom_target(gcr_criu_bundle ALL DEPENDS ${CMAKE_BINARY_DIR}/criu-bundle/criu)
  install(PROGRAMS ${CMAKE_BINARY_DIR}/criu-bundle/criu DESTINATION ${GCR_PRIVATE_DIR}/criu)
endif()

# The units name the installed gcr; systemd reads units from /usr/lib/systemd/system (and
# /etc/systemd/system): for another prefix, link or copy them there (docs/install.md).
# The prefix is known only at install time (cpack installs with /usr): written then.
install(FILES ${CMAKE_SOURCE_DIR}/packaging/systemd/gcrd.socket DESTINATION lib/systemd/system)
install(CODE "
  file(READ \"${CMAKE_SOURCE_DIR}/packaging/systemd/gcrd.service.in\" unit)
  string(REPLACE \"@GCR_INSTALL_FULL_BINDIR@\" \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR}\"
         unit \"\${unit}\")
  file(WRITE \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/lib/systemd/system/gcrd.service\" \"\${unit}\")")

# The man page, from the help texts of the installed binary's commands.
add_custom_command(
  OUTPUT ${CMAKE_BINARY_DIR}/man/gcr.1.gz ${CMAKE_BINARY_DIR}/man/changelog.gz
  # Ninja makes an output's directory itself; Make does not.
  COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/man
  COMMAND ${CMAKE_COMMAND} -E env "GCR_MANPAGE_EMULATOR=${CMAKE_CROSSCOMPILING_EMULATOR}"
          ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/scripts/gen-manpage.py
          $<TARGET_FILE:gcr_cli> ${PROJECT_VERSION} ${CMAKE_BINARY_DIR}/man/gcr.1
  COMMAND gzip -9nf ${CMAKE_BINARY_DIR}/man/gcr.1
  COMMAND gzip -9nc ${CMAKE_SOURCE_DIR}/packaging/debian/changelog > ${CMAKE_BINARY_DIR}/man/changelog.gz
  DEPENDS gcr_cli ${CMAKE_SOURCE_DIR}/scripts/gen-manpage.py
          ${CMAKE_SOURCE_DIR}/packaging/debian/changelog
  COMMENT "man page gcr.1 from gcr --help")
add_custom_target(gcr_manpage ALL DEPENDS ${CMAKE_BINARY_DIR}/man/gcr.1.gz)
install(FILES ${CMAKE_BINARY_DIR}/man/gcr.1.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
install(FILES ${CMAKE_BINARY_DIR}/man/changelog.gz DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(FILES ${CMAKE_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY ${CMAKE_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs
        FILES_MATCHING PATTERN "*.md")
