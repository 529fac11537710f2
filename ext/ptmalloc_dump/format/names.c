/* The names of the file's enumerations, made from their lists in format.h. */
#include "format/format.h"

const char *const ptmd_state_names[PTMD_ST_COUNT] = { PTMD_STATES(PTMD_ENUM_NAME) };
const char *const ptmd_anomaly_names[PTMD_AN_COUNT] = { PTMD_ANOMALY_KINDS(PTMD_ENUM_NAME) };
const char *const ptmd_heap_kind_names[PTMD_HEAP_KIND_COUNT] = { PTMD_HEAP_KINDS(PTMD_ENUM_NAME) };
const char *const ptmd_symbol_source_names[PTMD_SYMSRC_COUNT] = { PTMD_SYMBOL_SOURCES(PTMD_ENUM_NAME) };
const char *const ptmd_source_kind_names[PTMD_SOURCE_KIND_COUNT] = { PTMD_SOURCE_KINDS(PTMD_ENUM_NAME) };
const char *const ptmd_residency_source_names[PTMD_RESIDENCY_COUNT] = { PTMD_RESIDENCY_SOURCES(PTMD_ENUM_NAME) };
const char *const ptmd_mapping_kind_names[PTMD_MK_COUNT] = { PTMD_MAPPING_KINDS(PTMD_ENUM_NAME) };
const char *const ptmd_root_kind_names[PTMD_ROOT_KIND_COUNT] = { PTMD_ROOT_KINDS(PTMD_ENUM_NAME) };
const char *const ptmd_code_kind_names[PTMD_CODE_KIND_COUNT] = { PTMD_CODE_KINDS(PTMD_ENUM_NAME) };
const char *const ptmd_edge_kind_names[PTMD_EDGE_KIND_COUNT] = { PTMD_EDGE_KINDS(PTMD_ENUM_NAME) };

const char *ptmd_name_of(const char *const *names, size_t n, uint32_t value)
{
    return value < n && names[value] ? names[value] : "unknown";
}

#define PTMD_SECTION_NAME(constant, value, name, ...) [value] = name,
static const char *const section_names[] = { PTMD_SECTIONS(PTMD_SECTION_NAME) };

const char *ptmd_section_name(uint32_t type)
{
    return PTMD_NAME_OF(section_names, type);
}
