// The compiled part of fmt and spdlog, for a program that links them statically
// (cmake/stack.cmake). Debian ships both as shared libraries only; their headers carry the
// implementation in the *-inl.h files the shared libraries are built from, which a compiled-mode
// build (SPDLOG_COMPILED_LIB, no FMT_HEADER_ONLY) includes in one translation unit, with the
// explicit instantiations the headers declare extern. Which sinks: those common/logging.cpp
// makes.
#include <fmt/format-inl.h>

FMT_BEGIN_NAMESPACE
namespace detail {
template FMT_API auto dragonbox::to_decimal(float x) noexcept -> dragonbox::decimal_fp<float>;
template FMT_API auto dragonbox::to_decimal(double x) noexcept -> dragonbox::decimal_fp<double>;
template FMT_API locale_ref::locale_ref(const std::locale& loc);
template FMT_API auto locale_ref::get<std::locale>() const -> std::locale;
template FMT_API auto thousands_sep_impl(locale_ref) -> thousands_sep_result<char>;
template FMT_API auto decimal_point_impl(locale_ref) -> char;
template FMT_API void buffer<char>::append(const char*, const char*);
template FMT_API void vformat_to(buffer<char>&, string_view,
                                 basic_format_args<FMT_BUFFER_CONTEXT(char)>, locale_ref);
}  // namespace detail
FMT_END_NAMESPACE

#include <spdlog/common-inl.h>
#include <spdlog/details/backtracer-inl.h>
#include <spdlog/details/console_globals.h>
#include <spdlog/details/file_helper-inl.h>
#include <spdlog/details/log_msg-inl.h>
#include <spdlog/details/log_msg_buffer-inl.h>
#include <spdlog/details/null_mutex.h>
#include <spdlog/details/os-inl.h>
#include <spdlog/details/periodic_worker-inl.h>
#include <spdlog/details/registry-inl.h>
#include <spdlog/logger-inl.h>
#include <spdlog/pattern_formatter-inl.h>
#include <spdlog/sinks/ansicolor_sink-inl.h>
#include <spdlog/sinks/base_sink-inl.h>
#include <spdlog/sinks/basic_file_sink-inl.h>
#include <spdlog/sinks/rotating_file_sink-inl.h>
#include <spdlog/sinks/sink-inl.h>
#include <spdlog/sinks/stdout_color_sinks-inl.h>
#include <spdlog/sinks/stdout_sinks-inl.h>
#include <spdlog/spdlog-inl.h>

#include <mutex>

namespace spdlog {
template SPDLOG_API logger::logger(std::string name, sinks_init_list::iterator begin,
                                   sinks_init_list::iterator end);
template std::shared_ptr<logger> stdout_color_mt<synchronous_factory>(const std::string&, color_mode);
template std::shared_ptr<logger> stderr_color_mt<synchronous_factory>(const std::string&, color_mode);
template std::shared_ptr<logger> stdout_color_st<synchronous_factory>(const std::string&, color_mode);
template std::shared_ptr<logger> stderr_color_st<synchronous_factory>(const std::string&, color_mode);
namespace sinks {
template class SPDLOG_API base_sink<std::mutex>;
template class SPDLOG_API base_sink<details::null_mutex>;
template class SPDLOG_API basic_file_sink<std::mutex>;
template class SPDLOG_API basic_file_sink<details::null_mutex>;
template class SPDLOG_API rotating_file_sink<std::mutex>;
template class SPDLOG_API rotating_file_sink<details::null_mutex>;
template class SPDLOG_API ansicolor_sink<details::console_mutex>;
template class SPDLOG_API ansicolor_sink<details::console_nullmutex>;
template class SPDLOG_API ansicolor_stdout_sink<details::console_mutex>;
template class SPDLOG_API ansicolor_stdout_sink<details::console_nullmutex>;
template class SPDLOG_API ansicolor_stderr_sink<details::console_mutex>;
template class SPDLOG_API ansicolor_stderr_sink<details::console_nullmutex>;
template class SPDLOG_API stdout_sink_base<details::console_mutex>;
template class SPDLOG_API stdout_sink_base<details::console_nullmutex>;
template class SPDLOG_API stdout_sink<details::console_mutex>;
template class SPDLOG_API stdout_sink<details::console_nullmutex>;
template class SPDLOG_API stderr_sink<details::console_mutex>;
template class SPDLOG_API stderr_sink<details::console_nullmutex>;
}  // namespace sinks
}  // namespace spdlog
