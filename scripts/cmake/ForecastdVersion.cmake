# FORECASTD_VERSION_STRING: the project version plus `git describe` when built from a checkout.
set(FORECASTD_GIT_DESCRIBE "")
find_package(Git QUIET)
if(GIT_FOUND AND EXISTS "${PROJECT_SOURCE_DIR}/.git")
  execute_process(COMMAND "${GIT_EXECUTABLE}" describe --tags --always --dirty
                  WORKING_DIRECTORY "${PROJECT_SOURCE_DIR}"
                  OUTPUT_VARIABLE FORECASTD_GIT_DESCRIBE
                  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
endif()
if(FORECASTD_GIT_DESCRIBE)
  set(FORECASTD_VERSION_STRING "${PROJECT_VERSION} (git ${FORECASTD_GIT_DESCRIBE})")
else()
  set(FORECASTD_VERSION_STRING "${PROJECT_VERSION}")
endif()
