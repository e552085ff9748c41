# Fails unless LIBRARY's dynamic symbol table defines exactly tm_plugin_abi_version and
# tm_plugin_get_api. Usage: cmake -DNM=<nm> -DLIBRARY=<path> -P check_exports.cmake
execute_process(COMMAND ${NM} -D --defined-only ${LIBRARY}
                OUTPUT_VARIABLE symbols RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${NM} failed on ${LIBRARY}")
endif()
string(REGEX MATCHALL "[^\n]+" lines "${symbols}")
set(exported)
foreach(line IN LISTS lines)
  # "<address> <type> <name>"; skip absolute version-node symbols (type A).
  if(line MATCHES "^[0-9a-fA-F]+ ([A-Za-z]) ([^ ]+)$")
    if(NOT CMAKE_MATCH_1 STREQUAL "A")
      list(APPEND exported "${CMAKE_MATCH_2}")
    endif()
  endif()
endforeach()
list(SORT exported)
if(NOT exported STREQUAL "tm_plugin_abi_version;tm_plugin_get_api")
  message(FATAL_ERROR "${LIBRARY} exports [${exported}], expected exactly tm_plugin_abi_version and tm_plugin_get_api")
endif()
message(STATUS "exports: ${exported}")
