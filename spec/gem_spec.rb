# frozen_string_literal: true

require "rubygems/package"
require "spec_helper"

RSpec.describe "the gem" do
  it "builds, installs (compiling the extension) and dumps from any directory" do
    gem_home = File.join(tmpdir, "gems")
    Dir.chdir(SpecHelpers::ROOT) do
      out, err, status = Open3.capture3("gem", "build", "ptmalloc_dump.gemspec", "--output", File.join(tmpdir, "ptmalloc_dump.gem"))
      expect(status).to be_success, out + err
    end
    # as a user's shell would have it: no Bundler (RubyGems 3.4+ loads BUNDLER_SETUP by itself)
    env = ENV.keys.grep(/\ABUNDLE/).to_h { |k| [k, nil] }.merge("GEM_HOME" => gem_home, "GEM_PATH" => gem_home, "RUBYOPT" => nil,
                                                                "PTMALLOC_DUMP_DEVELOPMENT" => nil)
    built = Gem::Package.new(File.join(tmpdir, "ptmalloc_dump.gem"))
    expect(built.contents.grep(/\.(o|so)\z|Makefile\z|mkmf\.log\z/)).to eq([])
    expect(built.spec.homepage).to start_with("https://")
    expect(built.spec.requirements.join(" ")).to include("libpng")
    out, err, status = Open3.capture3(env, "gem", "install", "--local", "--no-document", File.join(tmpdir, "ptmalloc_dump.gem"))
    expect(status).to be_success, out + err
    # the build's objects are gone once the libraries are installed: the sources and the libraries remain
    installed = File.join(gem_home, "gems", "ptmalloc_dump-#{PtmallocDump::VERSION}")
    leftovers = Dir[File.join(installed, "ext", "**", "*")].grep(/\.(o|so)\z|mkmf\.log\z/)
    expect(leftovers).to eq([])
    expect(Dir[File.join(installed, "lib", "ptmalloc_dump", "*.so")].map { |f| File.basename(f) })
      .to contain_exactly("ptmalloc_dump.so", "ptmalloc_dump_reader.so", "ptmalloc_dump_track.so")
    out, err, status = Open3.capture3(env, File.join(gem_home, "bin", "ptmalloc-dump"), "--version", chdir: "/")
    expect(status).to be_success, err
    expect(out).to include(PtmallocDump::VERSION)
    dump = File.join(tmpdir, "x.dump")
    out, err, status = Open3.capture3(env, RbConfig.ruby, "-rptmalloc_dump", "-e", "p PtmallocDump.dump(#{dump.inspect})[:arena]", chdir: "/")
    expect(status).to be_success, err
    expect(out.to_i).to be > 0
    out, err, status = Open3.capture3(env, File.join(gem_home, "bin", "ptmalloc-visualize"), "--summary", dump, chdir: "/")
    expect(status).to be_success, err
    expect(out).to include("verify: verified")
  end
end
