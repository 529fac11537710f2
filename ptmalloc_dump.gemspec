# frozen_string_literal: true

require_relative "lib/ptmalloc_dump/version"

Gem::Specification.new do |spec|
  spec.name = "ptmalloc_dump"
  spec.version = PtmallocDump::VERSION
  spec.authors = ["ptmalloc_dump maintainers"]
  spec.summary = "Dump, account for and draw glibc malloc's heap of a live Ruby process"
  spec.description = <<~DESC
    Walks every arena, heap and chunk of glibc's ptmalloc2 inside the running Ruby process,
    classifies each chunk, records page residency, reconciles the result exactly with mallinfo2()
    and malloc_info(), and renders colour-coded heap maps and an HTML report.
  DESC
  spec.license = "MIT"
  spec.required_ruby_version = ">= 2.7"
  spec.platform = Gem::Platform::RUBY

  spec.files = Dir["lib/**/*.rb", "lib/ptmalloc_dump/output/assets/*", "ext/**/*.{c,h,rb}", "ext/**/depend", "exe/*",
                   "doc/*.md", "README.md", "LICENSE.txt"]
  spec.bindir = "exe"
  spec.executables = %w[ptmalloc-dump ptmalloc-visualize]
  spec.require_paths = ["lib"]
  spec.extensions = ["ext/ptmalloc_dump/extconf.rb", "ext/ptmalloc_dump_reader/extconf.rb",
                     "ext/ptmalloc_dump_track/extconf.rb"]
  spec.homepage = "https://rubygems.org/gems/ptmalloc_dump"
  spec.metadata["documentation_uri"] = "https://rubydoc.info/gems/ptmalloc_dump"
  spec.metadata["rubygems_mfa_required"] = "true"
  # what the libraries link at run time, besides Ruby and glibc (libpng: the one that reads dumps)
  spec.requirements << "libpng (libpng16-16 on Debian and Ubuntu, libpng on Fedora and RHEL)"
  spec.requirements << "zlib (zlib1g on Debian and Ubuntu), through libpng"
end
