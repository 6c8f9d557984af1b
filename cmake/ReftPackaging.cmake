# CPack .deb for reft (issue 6): reftd, reftctl, libreft + headers, the systemd unit,
# sysusers.d/tmpfiles.d entries, the environment file and the example config.
#
# include() this from the root CMakeLists.txt AFTER every add_subdirectory(), so the
# install() rules of reftd/reftctl/systemd exist. Build the package with:
#   cmake -S . -B build-deb -G Ninja -DCMAKE_INSTALL_PREFIX=/usr -DCMAKE_BUILD_TYPE=Release
#   cmake --build build-deb --target reftd reftctl reft -j2 && (cd build-deb && cpack -G DEB)
# The prefix must be /usr: the unit's ExecStart= is configured from CMAKE_INSTALL_FULL_SBINDIR
# at configure time, so the package prefix has to equal the configure prefix.
include(GNUInstallDirs)

if(NOT CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  message(STATUS "reft packaging: CMAKE_INSTALL_PREFIX is ${CMAKE_INSTALL_PREFIX}; "
                 "configure with -DCMAKE_INSTALL_PREFIX=/usr for a .deb whose unit finds reftd")
endif()

# libreft and its public headers (the trainer-side API; reft/*.h from client and base).
install(TARGETS reft LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/client/include/ ${PROJECT_SOURCE_DIR}/base/include/
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")

# Example config as the live config (a dpkg conffile: local edits survive upgrades), and the
# deployment examples as documentation.
install(FILES ${PROJECT_SOURCE_DIR}/deploy/config/reftd.toml
        DESTINATION ${CMAKE_INSTALL_FULL_SYSCONFDIR}/reft)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/deploy/config ${PROJECT_SOURCE_DIR}/deploy/k8s
                  ${PROJECT_SOURCE_DIR}/deploy/slurm ${PROJECT_SOURCE_DIR}/deploy/monitoring
        DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples USE_SOURCE_PERMISSIONS)
install(FILES ${PROJECT_SOURCE_DIR}/docs/operations.md ${PROJECT_SOURCE_DIR}/docs/metrics.md
        DESTINATION ${CMAKE_INSTALL_DOCDIR} OPTIONAL)

set(CPACK_GENERATOR "DEB")
set(CPACK_PACKAGE_NAME "reft")
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
set(CPACK_PACKAGE_VENDOR "reft")
set(CPACK_PACKAGE_CONTACT "reft maintainers <reft@example.invalid>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "per-node checkpoint daemon keeping training state in host shared memory")
set(CPACK_PACKAGING_INSTALL_PREFIX "${CMAKE_INSTALL_PREFIX}")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION "admin")
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)  # dpkg-shlibdeps fills Depends from the binaries
# systemd-sysusers and systemd-tmpfiles run in postinst.
set(CPACK_DEBIAN_PACKAGE_DEPENDS "systemd (>= 252)")

# Maintainer scripts (configured so the paths match the install layout) and conffiles.
set(REFT_PKG_SYSUSERS_CONF /usr/lib/sysusers.d/reft.conf)
set(REFT_PKG_TMPFILES_CONF /usr/lib/tmpfiles.d/reft.conf)
if(NOT CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  set(REFT_PKG_SYSUSERS_CONF ${CMAKE_INSTALL_PREFIX}/lib/sysusers.d/reft.conf)
  set(REFT_PKG_TMPFILES_CONF ${CMAKE_INSTALL_PREFIX}/lib/tmpfiles.d/reft.conf)
endif()
set(_reft_deb_dir ${CMAKE_BINARY_DIR}/packaging/debian)
foreach(script postinst prerm postrm)
  configure_file(${PROJECT_SOURCE_DIR}/deploy/debian/${script}.in ${_reft_deb_dir}/${script}
                 @ONLY FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ
                 GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
endforeach()
file(WRITE ${_reft_deb_dir}/conffiles
     "${CMAKE_INSTALL_FULL_SYSCONFDIR}/reft/reftd.toml\n${CMAKE_INSTALL_FULL_SYSCONFDIR}/default/reftd\n")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${_reft_deb_dir}/postinst ${_reft_deb_dir}/prerm ${_reft_deb_dir}/postrm
    ${_reft_deb_dir}/conffiles)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION TRUE)

include(CPack)
