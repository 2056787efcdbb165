# Included by ctest (tests/schedule/CMakeLists.txt): COST of each test listed
# in costs.txt, lines "<name> <runs> <seconds>".
file(STRINGS "${CMAKE_CURRENT_LIST_DIR}/costs.txt" _gossamer_costs)
foreach(_line IN LISTS _gossamer_costs)
  if(_line MATCHES "^(.+) [0-9]+ ([0-9.eE+-]+)$")
    set_tests_properties("${CMAKE_MATCH_1}" PROPERTIES COST "${CMAKE_MATCH_2}")
  endif()
endforeach()
