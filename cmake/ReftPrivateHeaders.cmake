# A component's public headers are in its include/ and its private ones beside its sources in
# src/ (docs/architecture.md "Layers"). Tests and benches of a component may read its private
# headers: reft_see_private_headers(<component folder>...) gives every target of the calling
# folder the components' src/ as an include directory. Call it after the folder's targets.
function(reft_see_private_headers)
  get_property(_targets DIRECTORY PROPERTY BUILDSYSTEM_TARGETS)
  foreach(_target IN LISTS _targets)
    get_target_property(_type ${_target} TYPE)
    if(_type STREQUAL "EXECUTABLE" OR _type STREQUAL "STATIC_LIBRARY")
      foreach(_component IN LISTS ARGN)
        target_include_directories(${_target} PRIVATE ${PROJECT_SOURCE_DIR}/${_component}/src)
      endforeach()
    endif()
  endforeach()
endfunction()
