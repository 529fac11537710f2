# frozen_string_literal: true

# The unit tier (`rake unit`) runs the examples tagged :unit, which start no process: while one runs,
# starting a process (spawn, system, backticks, fork, exec, popen, Open3) fails the example.
module UnitTier
  class ProcessStarted < StandardError; end

  class << self
    attr_accessor :active

    def refuse(how)
      raise ProcessStarted, "an example tagged :unit starts no process (#{how})" if active
    end
  end

  # The methods that start a process, each refused first.
  def self.guard(names, visibility)
    Module.new do
      names.each do |name|
        define_method(name) do |*args, &block|
          UnitTier.refuse(name)
          super(*args, &block)
        end
        ruby2_keywords(name) if respond_to?(:ruby2_keywords, true)
        send(visibility, name)
      end
    end
  end
end

Object.prepend(UnitTier.guard(%i[spawn system ` fork exec], :private))
Process.singleton_class.prepend(UnitTier.guard(%i[spawn fork exec], :public))
IO.singleton_class.prepend(UnitTier.guard(%i[popen], :public))

RSpec.configure do |config|
  config.around(:example, :unit) do |example|
    UnitTier.active = true
    begin
      example.run
    ensure
      UnitTier.active = false
    end
  end
end
