# frozen_string_literal: true

# Which sources make which library. ptmalloc_dump.so is what a worker that dumps loads with the gem:
# capture/, the file's writing side of format/, the dump's summary (bindings/figures.c over
# analysis/analysis.c, summary.c and rss.c) and the module's own bindings. ptmalloc_dump_reader.so is
# what reads, compares and renders dumps (format/, analysis/ and the classes' bindings), loaded on their
# first use. Read by both extconf.rb files and the Rakefile (valid Ruby 2.7: the compat chroots build it).
module PtmallocDumpSources
  DIR = __dir__
  # bindings/ by library; each file is in one list, errors.c and figures.c in both
  BINDINGS = {
    capture: %w[ptmalloc_dump signal_arrival stats_module tracing_module errors figures],
    reader: %w[reader_init format_module dump_class owners_class retention_class sites_class native_sites_class
               ruby_heap_class render_module diff_class errors figures]
  }.freeze
  SUMMARY_ANALYSIS = %w[analysis summary rss].freeze
  READER_FORMAT = %w[reader].freeze

  module_function

  def in_folder(folder)
    Dir[File.join(DIR, folder, "*.c")].sort.map { |f| "#{folder}/#{File.basename(f, '.c')}" }
  end

  def bindings(library)
    unassigned = in_folder("bindings").map { |f| File.basename(f) } - BINDINGS.values.flatten
    return BINDINGS.fetch(library).map { |name| "bindings/#{name}" } if unassigned.empty?

    raise ArgumentError, "bindings/#{unassigned.first}.c is in neither library (ext/ptmalloc_dump/sources.rb)"
  end

  # The sources of a library (:capture or :reader), as folder/name without .c.
  def of(library)
    case library
    when :capture
      in_folder("format").reject { |f| READER_FORMAT.include?(File.basename(f)) } + in_folder("capture") +
        SUMMARY_ANALYSIS.map { |name| "analysis/#{name}" } + bindings(:capture)
    when :reader then in_folder("format") + in_folder("analysis") + bindings(:reader)
    else raise ArgumentError, "no library #{library.inspect}"
    end
  end

  # Every .c file of a library, absolute (the Rakefile remakes a Makefile when this list changes).
  def paths(library)
    of(library).map { |f| File.join(DIR, "#{f}.c") }
  end
end
