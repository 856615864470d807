// Second translation unit of the consumer: including the umbrella header here
// as well as in main.cpp turns any missing `inline` into a link error.
#include <coulomb/coulomb.hpp>

const char* coulomb_consumer_second_tu_version();

const char* coulomb_consumer_second_tu_version() {
  return coulomb::version_string();
}
